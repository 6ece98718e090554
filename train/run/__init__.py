"""`python -m train`: the run, a wing of its own above the library.

The command line and its configuration (cli, config, flags, recipes, settings), the loop top to bottom
(loop), and what a run keeps (checkpoint, ema, metrics, trackers, report), with the models it builds
(models). It uses the library (train's other modules: `ImageNetLoader`, `Augment`, the errors) as a
user's own loop does; the library never imports it. train/__main__.py and train/report.py are the
doors users type (`python -m train`, `python -m train.report`).
"""
