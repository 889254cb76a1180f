"""Makes the synthetic learner (``synthetic.py``) importable as ``curricula_synthetic`` (the test folders are not
packages and pytest runs in importlib mode)."""

import importlib.util
import sys
from pathlib import Path

if "curricula_synthetic" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("curricula_synthetic", Path(__file__).with_name("synthetic.py"))
    sys.modules["curricula_synthetic"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["curricula_synthetic"])
