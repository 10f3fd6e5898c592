"""OmegaConf resolvers of the `train` config: the request's checks (behind `execution_evidence`, so that
resolving a composed config runs them) and `train --help`."""

from __future__ import annotations

from omegaconf import OmegaConf

from .schema import VALIDATE_RESOLVER

HELP_RESOLVER = "unilab_help"


def _help():
    from .catalog import help_text

    return help_text()


def _validated_evidence(*, _root_):
    from .validation import validated_evidence

    return validated_evidence(_root_=_root_)


def register_resolvers() -> None:
    if not OmegaConf.has_resolver(HELP_RESOLVER):  # `train --help` (hydra.help.template in conf/train.yaml)
        OmegaConf.register_new_resolver(HELP_RESOLVER, _help)
    if not OmegaConf.has_resolver(VALIDATE_RESOLVER):
        # Not cached: a config changed after it was resolved is checked again, as it now stands.
        OmegaConf.register_new_resolver(VALIDATE_RESOLVER, _validated_evidence)
