"""Errors that the command line reports as one clear line (no traceback) and a non-zero exit."""


class UserError(Exception):
    """Bad input from the user: an unknown name, a malformed spec, a missing file, a missing GPU."""


class SpecError(UserError):
    """An experiment spec that fails validation; the message names the file and the field."""

    def __init__(self, path: str, field: str, problem: str):
        self.path, self.field, self.problem = path, field, problem
        super().__init__(f"{path}: field '{field}': {problem}")
