"""The verification pipeline: which stage of a package diverges from Hugging Face, and why.

- `job`: the `verify` job (resolve, gather evidence, compare, report);
- `evidence`: what the runtime produced and what HF produced, as frozen values;
- `stages`: one function per stage, from evidence to a comparison;
- `preprocessing`: the runtime's processor against HF's (stage 1);
- `hf_reference`: the HF model and its inputs;
- `parity`: comparisons, tolerances and verdicts;
- `report`: the report, its table, HTML and plot.
"""

from mmforge.backend.verify.job import verify
from mmforge.backend.verify.report import VerifyReport

__all__ = ["VerifyReport", "verify"]
