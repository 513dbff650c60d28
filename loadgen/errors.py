"""The one exception type that reaches the user as a one-line message."""


class LoadgenError(Exception):
    """Bad input or an unusable environment.

    The CLI prints ``loadgen: error: <message>`` and exits with status 2, never a
    traceback, so the message must name the field, file or URL at fault.
    """
