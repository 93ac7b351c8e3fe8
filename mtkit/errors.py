"""The one exception type that reaches the user: a single line saying what is wrong and what to do."""


class MtkitError(Exception):
    """An error caused by the user's input (a file, a config key, a flag).

    The CLI prints ``str(error)`` on one line to stderr and exits with code 2; no traceback.
    """

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()))  # always one line
