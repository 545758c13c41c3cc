"""What can be called: the Tool type, the `@tool` decorator and the Toolbox allowlist."""

from __future__ import annotations

from toolwire.tools.base import Effect, Tool
from toolwire.tools.function import tool
from toolwire.tools.toolbox import Toolbox

__all__ = ["Effect", "Tool", "Toolbox", "tool"]
