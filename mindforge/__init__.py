"""MindForge: recursive self-improvement cycles for Mixture-of-LoRA agent models."""

__version__ = "0.1.0"
