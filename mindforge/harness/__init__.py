"""The Mixture-of-LoRA router harness: one implementation for the proxy and for training rollouts.

Import the parts from their modules (``mindforge.harness.client``,
``.render``, ``.session``, ``.harness``); this package imports nothing heavy.
"""
