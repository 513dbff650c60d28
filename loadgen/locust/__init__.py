"""loadgen inside Locust: the LLM user, the ramp shape over two or more targets, master/worker merging, a web UI tab.

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
