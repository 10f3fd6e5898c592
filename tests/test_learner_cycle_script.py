"""benchmarks/learner_cycle.py: variants parsed strictly, kernels summed per cycle and category."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import learner_cycle  # noqa: E402


def test_variants_parse_with_json_values_and_refuse_unknown_kinds():
    assert learner_cycle.parse_variant("base") == ("base", {})
    name, settings = learner_cycle.parse_variant("combo:inductor.combo_kernels=true,algo.batch_size=4096,env.X=a")
    assert name == "combo" and settings == {"inductor.combo_kernels": True, "algo.batch_size": 4096, "env.X": "a"}
    for bad in (":algo.x=1", "v:batch_size=1", "v:torch.x=1", "v:algo.x"):
        with pytest.raises(ValueError):
            learner_cycle.parse_variant(bad)


def test_kernels_are_summed_per_cycle_and_category():
    events = [("ampere_bf16_s16816gemm_relu", 10.0), ("triton_poi_fused_add_0", 2.0), ("triton_poi_fused_add_0", 2.0),
              ("void at::native::multi_tensor_apply_kernel<FusedAdamW>", 4.0), ("void index_select", 2.0)] * 2
    out = learner_cycle.summarize_kernels(events, cycles=2, cycle_ms=0.04)
    assert out["kernels_per_cycle"] == 5
    assert out["kernel_ms_per_cycle"] == pytest.approx(0.020)
    assert out["busy_fraction"] == pytest.approx(0.5)
    cats = out["by_category"]
    assert cats["gemm"] == {"kernels": 1.0, "ms": 0.01} and cats["fused (triton)"]["kernels"] == 2.0
    assert cats["optimizer"]["ms"] == pytest.approx(0.004) and cats["other"]["kernels"] == 1.0
    assert out["top_kernels"][0]["name"].startswith("ampere") and out["top_kernels"][0]["calls_per_cycle"] == 1


def test_the_script_refuses_a_bad_variant_before_touching_a_gpu(capsys):
    with pytest.raises(SystemExit) as stop:
        learner_cycle.main(["--dims", "1,2,3", "--variant", "v:nope.x=1"])
    assert stop.value.code == 2 and "not algo.FIELD" in capsys.readouterr().err
