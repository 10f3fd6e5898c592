"""The one error type of `unilab mps`: a message for the user and the exit status."""

from __future__ import annotations


class MpsToolError(RuntimeError):
    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code
