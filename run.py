"""Train and test one LRA model: ``python run.py task=listops attention=llops [experiment=quick]``.

Hydra composes ``conf/``; ``-m`` sweeps (``task=listops,text attention=llops,based seed=0,1,2``).
Each run writes ``result.json`` in ``outputs/<task>/<attention>/seed<seed>/<tag>/``;
``python -m results`` tabulates them.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities.exceptions import SIGTERMException
from pytorch_lightning.utilities.rank_zero import rank_zero_only

from lra.errors import UserError
from lra.train import run

log = logging.getLogger("run")


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    sweeping = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        record = run(OmegaConf.to_container(cfg, resolve=True), run_dir)
    except UserError as err:
        print(f"\nerror: {err}", file=sys.stderr)
        if sweeping:  # the failed record is written; let the other jobs of the sweep run
            return None
        sys.exit(2)
    except SIGTERMException:
        print(f"\ninterrupted: last.ckpt saved in {run_dir / 'checkpoints'}; rerun the same command to resume",
              file=sys.stderr)
        if sweeping:
            return None
        sys.exit(143)
    except Exception:
        if not sweeping:
            raise
        log.exception("job failed; its result.json says status=failed, the sweep goes on")
        return None
    m = record["metrics"]
    if rank_zero_only.rank != 0:
        return m["val_acc"]
    if record.get("already_completed"):
        print(f"\nalready completed: {run_dir / 'result.json'} (test_acc={m['test_acc']:.4f}); left as it is. "
              f"Add rerun=true to train it again from scratch (the old outputs move to replaced/).")
        return m["val_acc"]
    print(f"\n{record['task']} / {record['attention']} / seed {record['seed']}: "
          f"val_acc={m['val_acc']:.4f} test_acc={m['test_acc']:.4f} majority_acc={m['majority_acc']:.4f} "
          f"({record['wall_time_s']:.0f} s)\nrecord: {run_dir / 'result.json'}")
    return m["val_acc"]


if __name__ == "__main__":
    main()
