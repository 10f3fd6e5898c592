"""Stand-ins for a rank's learner and collector in real spawned processes, for the launcher's supervisor: each
starts as the real roles do (become_child, Ready) and then fails or waits in one way."""

from __future__ import annotations

import os
import time

WAIT_S = 600.0  # a wait that ends only on a stop: far beyond any test's hang guard


class Unsendable:
    """A message whose pickling fails as a CPU tensor's did with TMPDIR too long for its socket."""

    def __reduce__(self):
        raise OSError("AF_UNIX path too long")


def role(name: str, how: str, inbox, to_peer, to_launcher, stop_event) -> None:
    """`how`: "dies" (exits 1 before it is Ready), "unsendable" (sends its peer a message that cannot be sent, then
    waits for the peer), "waits" (waits for its peer's message until stopped), "deaf" (ignores stop requests and
    SIGTERM)."""
    from unilab.runtime.messages import Mailbox, StopRequested, become_child
    from unilab.runtime.protocol import COLLECTOR_INBOX, LEARNER_INBOX, Act, Buffers, Ready

    if how == "dies":
        os._exit(1)
    become_child(name, to_launcher)
    to_launcher.put(Ready(name, os.getpid(), "cpu", None))
    if how == "deaf":
        while True:
            time.sleep(0.1)
    learner = name.startswith("learner")
    mailbox = Mailbox(name, inbox, stop_event, LEARNER_INBOX if learner else COLLECTOR_INBOX)
    if how == "unsendable":
        to_peer.put(Unsendable())
    try:
        mailbox.get(Buffers if learner else Act, phase="start-up", timeout_s=WAIT_S)
    except StopRequested:
        pass
    to_launcher.close()
    to_launcher.join_thread()
