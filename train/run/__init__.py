"""`python -m train`: the run, a wing of its own above the library.

The command line and its configuration (cli, config, flags, recipes, settings), the loop top to bottom
(loop), the device a rank trains on (devices), what a run keeps (checkpoint, ema, metrics, trackers,
report, and its directory's lock, run_lock), the models it builds (models), and a checkpoint evaluated
on its own (evaluation). It uses the library (train's other modules: `ImageNetLoader`, `Augment`, the
errors) as a user's own loop does; the library never imports it. train/__main__.py, train/report.py
and train/evaluate.py are the doors users type (`python -m train`, `python -m train.report`,
`python -m train.evaluate`).
"""
