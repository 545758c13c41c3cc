"""Test doubles for toolwire and for applications built on it.

`ScriptedModel` and `FunctionModel` stand in for a model inside the process; `ScriptedServer` is a real
OpenAI-compatible HTTP server on 127.0.0.1 that answers from a script and can misbehave on purpose.
"""

from __future__ import annotations

from toolwire.testing.fakes import (
    FunctionModel,
    ModelRequest,
    ScriptedModel,
    UnconsumedModelSteps,
    UnexpectedModelCall,
    call,
    reply,
)
from toolwire.testing.server import ScriptedServer, Step

__all__ = [
    "FunctionModel",
    "ModelRequest",
    "ScriptedModel",
    "ScriptedServer",
    "Step",
    "UnconsumedModelSteps",
    "UnexpectedModelCall",
    "call",
    "reply",
]
