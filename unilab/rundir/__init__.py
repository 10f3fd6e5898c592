"""The run directory: its layout and file names, and every module that writes or reads them.

- layout: the names (run_config.json, metrics.jsonl, checkpoints/, ...) and small path helpers.
- create: a new run directory; archiving a resumed run's earlier segment.
- run_config: run_config.json and the diff between two runs' configs.
- manifest: runtime_manifest.json.
- summary: run_summary.json.
- metrics: the metrics.jsonl writer (with TensorBoard and the console line) and its one reader.
- checkpoint: saving, finding (an intact one) and loading checkpoints.
- lock: run.lock, the launcher's exclusive hold on a run directory.
- ranks: a torchrun or srun run's rank directories gathered into rank 0's manifest (`unilab merge-ranks`).

JSON files are written through unilab.atomic (a reader never sees half of one). Nothing is imported here: a
user of one module (`manifest` imports unilab.mps.record) must not pull in the others and their dependencies.
"""
