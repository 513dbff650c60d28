"""loadgen inside Locust: the LLM user, the ramp shape over two or more targets, master/worker merging, a web UI tab.

In: a Locust run (its options and ``--config`` TOML: settings/config.RampConfig), on a local runner or a
master with workers. Out: the same stage results as ``loadgen run`` (run/results.py: ``ramp.json`` with .csv
and .hlog as each stage ends), the web UI's tab, and the analysis ``loadgen crossover --from`` reads.

Use from a locustfile (see scenarios/ramp.py)::

    from loadgen.locust import LLMUser, RampShape, install
    install()

``LLMUser``, ``RampShape`` and ``install`` import Locust, which monkey-patches
the standard library with gevent, so they are loaded only when asked for;
``loadgen.settings.config``, ``.stageplan`` and ``.conductor`` can be imported
without Locust.
"""

__all__ = ["LLMUser", "RampShape", "install"]


def __getattr__(name):
    if name == "LLMUser":
        from .user import LLMUser

        return LLMUser
    if name == "RampShape":
        from .shape import RampShape

        return RampShape
    if name == "install":
        from .hooks import install

        return install
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
