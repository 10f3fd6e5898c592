"""OmegaConf resolvers; the execution probe is one of them so composing a config runs it."""

from __future__ import annotations

from omegaconf import OmegaConf

from .schema import PROBE_RESOLVER


def _probe(requested, device, backend, timeout_s):
    from unilab.mps import probe

    # Learner and collector both run on training.device (the roles of a rank share it).
    evidence = probe.probe_cuda_process_sharing(
        requested, device, device, backend=backend, timeout_s=float(timeout_s)
    )
    return OmegaConf.create(evidence.model_dump(mode="json"))


HELP_RESOLVER = "unilab_help"


def _help():
    from unilab.cli.catalog import help_text

    return help_text()


def register_resolvers() -> None:
    if not OmegaConf.has_resolver(HELP_RESOLVER):  # `train --help` (hydra.help.template in conf/train.yaml)
        OmegaConf.register_new_resolver(HELP_RESOLVER, _help)
    if not OmegaConf.has_resolver(PROBE_RESOLVER):
        # use_cache: one probe per composed config, so every reader sees the same evidence.
        OmegaConf.register_new_resolver(PROBE_RESOLVER, _probe, use_cache=True)
