"""Run evidence: runtime_manifest.json, run_config.json, atomic writes."""
