"""The one exception type of the hetplan package."""


class HetplanError(RuntimeError):
    """A hetplan error: `message` is the one-line message of the runtime or
    the CLI (it names the file and, where there is one, the node); `code` the
    runtime's status name (``NotFound``, ``InvalidModel``, ``Unsupported``,
    ``InvalidArgument``, ``RuntimeError``, ...) or ``"CompileError"`` for a
    failed ``hetplan`` command."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self):
        return self.message
