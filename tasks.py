"""invoke's face of the project: `invoke build --device a3 --backend sglang` and every other task. The tasks live in
src/ascend_images/cli/ (one module per area), and `ascend-images` runs the very same collection; a checkout adds the
maintainers' tasks of dev/ (bench, ci-costs)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # this checkout's code, installed or not
sys.path.insert(1, str(Path(__file__).resolve().parent))  # and its dev/ package

from ascend_images.cli.entry import namespace
from ascend_images.cli.program import install_suggestions
from dev.tasks import tasks as dev_tasks

install_suggestions()  # `invoke biuld` and `invoke build --devcie` name the nearest task or flag, as ascend-images does
ns = namespace()
for dev_task in dev_tasks():
    ns.add_task(dev_task)
