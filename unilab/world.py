"""Where one rank sits in a data-parallel run: the one description both ways of launching ranks fill in.

- `train training.run.devices=[0,1]`: one launcher on one host starts every rank; it makes the contexts itself
  (`single_host`), with a free port on 127.0.0.1 for the learners' rendezvous.
- `torchrun ... -m unilab.cli.train` (or `srun` of `train` with one task per GPU): every worker is one rank's
  launcher; its context comes from the environment the cluster launcher gave it (`from_environment`).

The learners join their process group from the context alone (`init_method="env://"` with MASTER_ADDR and
MASTER_PORT taken from it, unilab.runtime.rank_watch), whichever way the ranks were started. Picklable and
free of torch: the launching process reads it (it never imports torch).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Mapping

TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
SLURM_KEYS = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
MASTER_KEYS = ("MASTER_ADDR", "MASTER_PORT")
RANK_SEED_STRIDE = 1000  # rank r seeds its learner and collector with training.run.seed + 1000 r


class WorldError(ValueError):
    """The cluster launcher's environment does not describe a rank (a missing or malformed variable)."""


@dataclass(frozen=True)
class DistributedContext:
    rank: int  # global rank
    world_size: int
    local_rank: int  # rank on its node: its GPU index under torchrun or srun
    node_rank: int
    master_addr: str  # the learners' rendezvous (MASTER_ADDR:MASTER_PORT)
    master_port: int | None
    launched_by: str = "train"  # train (its own ranks), torchrun or srun
    run_id: str | None = None  # the same on every rank: torchrun's --rdzv-id, else the Slurm job (and step)
    hostname: str = ""

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def cluster(self) -> bool:
        """Started by a cluster launcher: this process is one rank's launcher, the others run elsewhere."""
        return self.launched_by != "train"

    def rendezvous_env(self) -> dict[str, str]:
        """What `init_method="env://"` reads (RANK and WORLD_SIZE are passed as arguments)."""
        return {"MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}

    def default_run_name(self, algo: str, task: str) -> str | None:
        """A run name every rank derives alike (None without a run id): never from the clock, which differs
        between nodes."""
        return f"{algo}_{task}_{self.run_id}" if self.run_id else None


ONE_RANK = DistributedContext(rank=0, world_size=1, local_rank=0, node_rank=0, master_addr="127.0.0.1",
                              master_port=None)


def rank_seed(seed: int, rank: int) -> int:
    """The seed of global rank `rank`'s learner and collector (envs, exploration, replay sampling). The
    learners' weights do not depend on it beyond rank 0: they start from rank 0's, broadcast."""
    return int(seed) + RANK_SEED_STRIDE * int(rank)


def single_host(world_size: int, port: int | None) -> list[DistributedContext]:
    """The contexts of the ranks one `train` starts on this host (`training.run.devices`)."""
    host = socket.gethostname()
    return [DistributedContext(rank=r, world_size=world_size, local_rank=r, node_rank=0, master_addr="127.0.0.1",
                               master_port=port, hostname=host) for r in range(world_size)]


def from_environment(env: Mapping[str, str]) -> DistributedContext | None:
    """This process's rank as torchrun or srun describe it; None for a plain `train` (neither).

    torchrun: TORCHELASTIC_RUN_ID, or RANK, WORLD_SIZE and LOCAL_RANK together; MASTER_ADDR/MASTER_PORT are
    torchrun's own (its agent's store). srun without torchrun: SLURM_PROCID, SLURM_NTASKS (more than one) and
    SLURM_LOCALID, with MASTER_ADDR and MASTER_PORT exported by the job script; a job step of one task, or a
    batch script without MASTER_ADDR, is a plain run."""
    if "TORCHELASTIC_RUN_ID" in env or all(key in env for key in TORCHRUN_KEYS):
        return _context(env, "torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK"),
                        _run_id(env.get("TORCHELASTIC_RUN_ID")) or _slurm_run_id(env))
    if all(key in env for key in SLURM_KEYS) and _int(env, "SLURM_NTASKS") > 1:
        missing = [key for key in MASTER_KEYS if not env.get(key)]
        if missing:
            return None  # a Slurm job with several tasks that does not ask for a data-parallel rendezvous
        return _context(env, "srun", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID"),
                        _slurm_run_id(env))
    return None


def _context(env: Mapping[str, str], launched_by: str, keys: tuple[str, str, str, str],
             run_id: str | None) -> DistributedContext:
    rank_key, size_key, local_key, node_key = keys
    missing = [key for key in (rank_key, size_key, local_key, *MASTER_KEYS) if not env.get(key)]
    if missing:
        raise WorldError(f"started by {launched_by}, but {', '.join(missing)} is not set: launch with "
                         f"{'torchrun' if launched_by == 'torchrun' else 'srun and export MASTER_ADDR/MASTER_PORT'}")
    rank, world_size, local_rank = _int(env, rank_key), _int(env, size_key), _int(env, local_key)
    if not 0 <= rank < world_size or local_rank < 0:
        raise WorldError(f"{rank_key}={rank}, {size_key}={world_size}, {local_key}={local_rank}: "
                         f"expected 0 <= {rank_key} < {size_key} and {local_key} >= 0")
    return DistributedContext(rank=rank, world_size=world_size, local_rank=local_rank,
                              node_rank=_int(env, node_key) if env.get(node_key) else 0,
                              master_addr=env["MASTER_ADDR"], master_port=_int(env, "MASTER_PORT"),
                              launched_by=launched_by, run_id=run_id, hostname=socket.gethostname())


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except (KeyError, ValueError):
        raise WorldError(f"{key}={env.get(key)!r}: expected an integer") from None


def _run_id(value: str | None) -> str | None:
    return value if value and value != "none" else None  # torchrun's default --rdzv-id is "none"


def _slurm_run_id(env: Mapping[str, str]) -> str | None:
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    step = env.get("SLURM_STEP_ID")
    return f"job{job}" + (f"_step{step}" if step not in (None, "", "0") else "")
