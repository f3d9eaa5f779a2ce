"""The config dataclass: presets, validation messages, overrides, config files, resume rules."""

from __future__ import annotations

import dataclasses
import json

import pytest

from distcgan.config import (
    PRESETS,
    TrainConfig,
    apply_overrides,
    check_resume_changes,
    load_config_file,
    preset,
)
from distcgan.errors import UserError
from distcgan.run.rundir import read_config_file, write_json


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_valid_and_named(name):
    cfg = preset(name)
    assert cfg.preset == name


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(UserError, match="unknown preset 'cifar': choose one of digits, mnist"):
        preset("cifar")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0 .set --batch-size."),
        ({"steps": -5}, "steps must be a positive integer, got -5 .set --steps."),
        ({"resolution": 24}, "resolution 24 is not supported: the model takes .16, 32, 64. px"),
        ({"lr_g": 0.0}, "lr_g must be > 0"),
        ({"beta1": 1.0}, r"beta1 must be in \[0, 1\)"),
        ({"devices": "gpu0"}, "devices 'gpu0' is not understood"),
        ({"classes": (1, 1)}, "classes must be distinct non-negative ids"),
        ({"d_batch": "mixed"}, "d_batch must be joint or separate"),
        ({"d_batch": "separate"}, "d_batch 'separate' does not work at 16 px"),
        ({"cuda_graphs": "true"}, "cuda_graphs must be auto, on or off, got 'true' .set --cuda"),
        (
            {"d_bn_eps": 0.0},
            "d_bn_eps must be > 0, got 0.0: set --d-bn-eps to the paper's 0.8 or PyTorch's 1e-5",
        ),
    ],
)
def test_bad_values_name_the_field_and_the_fix(change, message):
    with pytest.raises(UserError, match=message):
        dataclasses.replace(TrainConfig(), **change)


def test_separate_d_batches_are_fine_at_32_px():
    assert TrainConfig(resolution=32, d_batch="separate").d_batch == "separate"


def test_overrides_are_type_checked():
    cfg = apply_overrides(TrainConfig(), {"lr_g": 1, "classes": [3, 4], "data": "x.h5"}, "cli")
    assert cfg.lr_g == 1.0 and isinstance(cfg.lr_g, float) and cfg.classes == (3, 4)
    with pytest.raises(UserError, match="f.json: steps must be of type int, got '10'"):
        apply_overrides(TrainConfig(), {"steps": "10"}, "f.json")
    with pytest.raises(UserError, match="f.json: steps must be of type int, got True"):
        apply_overrides(TrainConfig(), {"steps": True}, "f.json")
    with pytest.raises(UserError, match="classes must be a list of integers"):
        apply_overrides(TrainConfig(), {"classes": 3}, "f.json")


def test_unknown_key_is_named_with_the_valid_ones():
    with pytest.raises(UserError, match="f.json: unknown key 'learning_rate'; valid keys are"):
        apply_overrides(TrainConfig(), {"learning_rate": 1e-3}, "f.json")


def test_config_file_errors(tmp_path):
    with pytest.raises(UserError, match="config file .*nope.json does not exist"):
        load_config_file(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{steps: 3")
    with pytest.raises(UserError, match="is not valid JSON"):
        load_config_file(str(bad))
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(UserError, match="must hold a JSON object"):
        load_config_file(str(arr))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"steps": 7, "format_version": 1}))
    assert load_config_file(str(good)) == {"steps": 7}


def test_resume_may_extend_steps_but_not_change_the_model():
    stored = TrainConfig(steps=100)
    check_resume_changes(stored, dataclasses.replace(stored, steps=200, devices="cpu"))
    with pytest.raises(UserError, match=r"--resume cannot change lr_g \(0.0002 -> 0.001\)"):
        check_resume_changes(stored, dataclasses.replace(stored, lr_g=1e-3))


@pytest.mark.parametrize(("stored", "read"), [(True, "on"), (False, "off")])
def test_a_run_stored_when_cuda_graphs_was_a_switch_reads_as_it_trained(tmp_path, stored, read):
    """Before auto, cuda_graphs was true or false in RUN/config.json: false (eager) stays off,
    so a resumed run goes on as it trained."""
    path = tmp_path / "config.json"
    write_json(path, {**TrainConfig().to_dict(), "cuda_graphs": stored})
    assert read_config_file(path).cuda_graphs == read
    # a --config FILE copied from such a run, too
    copied = tmp_path / "copied.json"
    copied.write_text(json.dumps({"steps": 7, "cuda_graphs": stored}))
    cfg = apply_overrides(TrainConfig(), load_config_file(str(copied)), where=str(copied))
    assert cfg.cuda_graphs == read and cfg.steps == 7
    assert TrainConfig().cuda_graphs == "auto"


def test_to_dict_round_trips_through_json():
    cfg = TrainConfig(classes=(2, 5), data="d.h5")
    again = apply_overrides(TrainConfig(), json.loads(json.dumps(cfg.to_dict())), "x")
    assert again == cfg
