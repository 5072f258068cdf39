"""invoke's face of the project: `invoke build --device a3 --backend sglang` and every other task. The tasks live in
src/ascend_images/cli/ (one module per area); `ascend-images` runs the very same collection."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # this checkout's code, installed or not

from ascend_images.cli.entry import namespace
from ascend_images.cli.program import install_suggestions

install_suggestions()  # `invoke biuld` and `invoke build --devcie` name the nearest task or flag, as ascend-images does
ns = namespace()
