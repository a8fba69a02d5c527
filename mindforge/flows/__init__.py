"""Prefect flows: thin wrappers that call the stages and publish what they did.

``rsi_cycle`` (rsi_cycle.py) runs N cycles, each one a subflow with
Discovery, Expansion and Update as subflows; ``expansion_flow`` and
``update_flow`` are also deployed on their own (see prefect.yaml). Nothing
else in the package imports Prefect (``tests/test_layers.py`` checks it):
resume logic lives in ``mindforge.cycle`` and the stage folders, so a flow
rerun and a CLI rerun resume the same way.
"""
