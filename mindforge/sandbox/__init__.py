"""Docker sandbox: every reward in MindForge is a verdict from here."""

from mindforge.sandbox.config import SandboxConfig
from mindforge.sandbox.image import ensure_image
from mindforge.sandbox.pool import SandboxError, SandboxPool, ToolSession

__all__ = ["SandboxConfig", "SandboxError", "SandboxPool", "ToolSession", "ensure_image"]
