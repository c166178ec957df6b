"""The resumable job's tier from the environment: `--object-tier` defaults to
$RACKFORM_CHECKPOINT_TIER and `--keep` to $RACKFORM_CHECKPOINT_KEEP (the Slurm prolog gives every
job its tier), each checked as the option is, with an error that names the variable."""

from __future__ import annotations

import pytest

from validators.resumable_train import parse


@pytest.fixture
def environ(monkeypatch):
    for k in ("RACKFORM_CHECKPOINT_TIER", "RACKFORM_CHECKPOINT_KEEP"):
        monkeypatch.delenv(k, raising=False)

    def set_(**kv: str) -> None:
        for k, v in kv.items():
            monkeypatch.setenv(f"RACKFORM_CHECKPOINT_{k}", v)

    return set_


def args(tmp_path, *extra: str):
    return parse(["--device", "cpu", "--checkpoint-dir", str(tmp_path), *extra])


def test_without_the_variables_there_is_no_tier_and_two_are_kept(tmp_path, environ):
    a = args(tmp_path)
    assert (a.object_tier, a.keep) == (None, 2)
    environ(TIER="", KEEP="")  # set but empty: as unset
    a = args(tmp_path)
    assert (a.object_tier, a.keep) == (None, 2)


def test_the_variables_give_the_tier_and_how_many_are_kept(tmp_path, environ):
    environ(TIER="/shared/checkpoints/job-42", KEEP="3")
    a = args(tmp_path)
    assert (a.object_tier, a.keep) == ("/shared/checkpoints/job-42", 3)
    environ(TIER="s3://ml-ckpts/llm/run-7")
    assert args(tmp_path).object_tier == "s3://ml-ckpts/llm/run-7"


def test_the_options_win_over_the_variables(tmp_path, environ):
    environ(TIER="/shared/checkpoints/job-42", KEEP="3")
    a = args(tmp_path, "--object-tier", "file:///shared/other", "--keep", "5")
    assert (a.object_tier, a.keep) == ("file:///shared/other", 5)


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"KEEP": "two"}, "$RACKFORM_CHECKPOINT_KEEP='two': the checkpoints kept, a whole number"),
        ({"KEEP": "0"}, "$RACKFORM_CHECKPOINT_KEEP='0': keep at least 1 checkpoint"),
        ({"TIER": "checkpoints/job-42"}, "$RACKFORM_CHECKPOINT_TIER: 'checkpoints/job-42' is not"),
        ({"TIER": "gs://b/p"}, "$RACKFORM_CHECKPOINT_TIER: 'gs://b/p' is not an object-tier URL"),
    ],
)
def test_a_bad_variable_is_an_error_naming_it(tmp_path, environ, capsys, env, said):
    environ(**env)
    with pytest.raises(SystemExit) as e:
        args(tmp_path)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert said in err, err
    if "TIER" in env:  # both forms it takes
        assert "s3://BUCKET/PREFIX" in err and "/ABS/PATH" in err


def test_a_bad_option_is_named_as_the_option(tmp_path, environ, capsys):
    environ(TIER="/shared/checkpoints/job-42")
    with pytest.raises(SystemExit):
        args(tmp_path, "--object-tier", "rel/dir")
    assert "--object-tier: 'rel/dir' is not an object-tier URL" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        args(tmp_path, "--keep", "0")
    assert "--keep must be at least 1" in capsys.readouterr().err
