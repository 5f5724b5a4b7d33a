"""commons_arena.files, the one way out: no links, no special files, never an input, names checked,
temp file + rename; and the one TOML writer (a property test: any data TOML can hold reads back equal)."""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commons_arena import files, inputs
from commons_arena.files import (
    OutputError,
    OutputStream,
    append_line,
    check_outputs,
    make_folder,
    remove_file,
    safe_join,
    toml_text,
    toml_value,
    write_file,
)
from commons_arena.inputs import InputError, loads_json


@pytest.fixture(autouse=True)
def _fresh_inputs():
    inputs.forget_inputs()
    yield
    inputs.forget_inputs()


def test_write_file_writes_and_replaces(tmp_path):
    path = write_file(tmp_path / "a.txt", "one\n")
    assert path.read_text() == "one\n"
    write_file(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]  # no temp file left


def test_a_symlink_at_the_target_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = make_folder(tmp_path / "out")
    (out / "scores.csv").symlink_to(victim)
    with pytest.raises(OutputError, match="symlink"):
        write_file(out / "scores.csv", "x")
    with pytest.raises(OutputError, match="symlink"):
        check_outputs(out, ["scores.csv"], force=True)
    dangling = out / "dangling.toml"
    dangling.symlink_to(tmp_path / "nowhere.toml")
    with pytest.raises(OutputError, match="symlink"):
        write_file(dangling, "x")
    assert victim.read_text() == "keep" and not (tmp_path / "nowhere.toml").exists()


def test_a_symlinked_output_folder_is_refused(tmp_path):
    real = make_folder(tmp_path / "real")
    (tmp_path / "report").symlink_to(real, target_is_directory=True)
    with pytest.raises(OutputError, match="symlink"):
        make_folder(tmp_path / "report")
    with pytest.raises(OutputError, match="symlink"):
        write_file(tmp_path / "report" / "a.csv", "x")
    with pytest.raises(OutputError, match="symlink"):
        make_folder(tmp_path / "report" / "deeper", root=tmp_path)
    assert list(real.iterdir()) == []


def test_special_files_are_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="not a regular file"):
        write_file(fifo, "x")
    (tmp_path / "folder").mkdir()
    with pytest.raises(OutputError, match="not a regular file"):
        write_file(tmp_path / "folder", "x")


def test_an_input_is_never_written_over_or_removed_by_any_name(tmp_path):
    scenario = tmp_path / "out" / "scenario.toml"
    scenario.parent.mkdir()
    scenario.write_text('name = "x"\n')
    inputs.read_text(scenario)  # the command read it
    with pytest.raises(OutputError, match="inputs"):
        write_file(scenario, "overwritten")
    with pytest.raises(OutputError, match="inputs"):
        write_file(tmp_path / "out" / ".." / "out" / "scenario.toml", "overwritten")
    os.link(scenario, tmp_path / "out" / "scores.csv")  # the same file under another name
    with pytest.raises(OutputError, match="inputs"):
        write_file(tmp_path / "out" / "scores.csv", "overwritten")
    with pytest.raises(OutputError, match="inputs"):
        remove_file(scenario)
    assert scenario.read_text() == 'name = "x"\n'
    inputs.forget_inputs()  # the next command: no longer an input
    write_file(scenario, "new")
    assert scenario.read_text() == "new"


def test_a_record_read_as_own_can_be_rewritten(tmp_path):
    state = write_file(tmp_path / "state.json", "{}")
    inputs.load_json_object(state, "run state", own=True)
    write_file(state, '{"iterations": 1}')


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "a\\b", "a\0b", "x" * 201, "é" * 101])
def test_names_from_input_are_checked(tmp_path, name):
    with pytest.raises(OutputError):
        safe_join(tmp_path, name)


def test_names_that_are_fine(tmp_path):
    assert safe_join(tmp_path, "broad-train", "random") == tmp_path / "broad-train" / "random"
    assert safe_join(tmp_path, "..x", "x" * 200).parent == tmp_path / "..x"


def test_existing_outputs_need_force(tmp_path):
    write_file(tmp_path / "scores.csv", "x")
    with pytest.raises(OutputError, match="--force"):
        check_outputs(tmp_path, ["scores.csv"], force=False)
    check_outputs(tmp_path, ["scores.csv"], force=True)


def test_stream_appears_only_when_closed(tmp_path):
    path = tmp_path / "run.jsonl"
    stream = OutputStream(path)
    stream.write("a\n")
    stream.flush()
    assert not path.exists()
    stream.close()
    stream.close()
    assert path.read_text() == "a\n" and [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]


def test_append_line_never_follows_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "league.json").symlink_to(victim)
    with pytest.raises(OutputError, match="symlink"):
        append_line(tmp_path / "league.json", "{}")
    log = append_line(tmp_path / "log.json", "{}")
    append_line(log, "{}")
    assert log.read_text() == "{}\n{}\n" and victim.read_text() == "keep\n"


def test_new_folder_must_be_new(tmp_path):
    make_folder(tmp_path / "run", new=True)
    with pytest.raises(OutputError, match="exists"):
        make_folder(tmp_path / "run", new=True)


def test_publish_folder_replaces_a_planted_link_without_following_it(tmp_path):
    victim = make_folder(tmp_path / "victim")
    write_file(victim / "keep", "keep")
    (tmp_path / "target").symlink_to(victim, target_is_directory=True)
    staging = make_folder(tmp_path / ".staging")
    write_file(staging / "a", "a")
    files.publish_folder(staging, tmp_path / "target")
    assert not (tmp_path / "target").is_symlink() and (tmp_path / "target" / "a").read_text() == "a"
    assert (victim / "keep").read_text() == "keep"


# ------------------------------------------------------------------ the one TOML writer

_KEYS = st.text(min_size=1, max_size=12)
_SCALARS = st.one_of(
    st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False), st.text(max_size=30),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(_KEYS, inner, max_size=4)), max_leaves=12)
_DOCS = st.dictionaries(_KEYS, st.one_of(_VALUES, st.dictionaries(_KEYS, _VALUES, max_size=4)), max_size=6)


def _no_surrogates(value):
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return all(_no_surrogates(k) and _no_surrogates(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_no_surrogates(v) for v in value)
    return True


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_DOCS.filter(_no_surrogates))
def test_toml_text_reads_back_equal(data):
    assert tomllib.loads(toml_text(data, header=["a header\nover two lines"])) == data


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40).filter(_no_surrogates))
def test_a_string_stays_one_value(text):
    """Issue 43: two of the three old writers wrote invalid TOML for a value holding a newline."""
    assert tomllib.loads(f"name = {toml_value(text)}\nafter = 1\n") == {"name": text, "after": 1}


def test_toml_special_values():
    assert tomllib.loads(f"a = {toml_value(math.inf)}\nb = {toml_value(-math.inf)}")["b"] == -math.inf
    assert math.isnan(tomllib.loads(f"a = {toml_value(math.nan)}")["a"])
    with pytest.raises(ValueError, match="surrogate"):
        toml_value("\ud800")
    with pytest.raises(TypeError):
        toml_value(object())


def test_population_and_mixture_writers_hold_a_newline(tmp_path):
    from experiments.training.mixture import mixture_text
    from policies.population import Population

    text = Population(agents={"allocator": "planner"}, name='two\nlines "quoted"').to_toml(tmp_path / "p.toml")
    assert tomllib.loads(text)["name"] == 'two\nlines "quoted"'
    assert Population.from_toml(tmp_path / "p.toml").name == 'two\nlines "quoted"'
    assert tomllib.loads(mixture_text([("a\nb", "r\n.toml", 1.0)]))["backgrounds"]["a\nb"]["roster"] == "r\n.toml"


def test_nothing_written_leaves_a_temp_file_on_error(tmp_path):
    class Broken:
        def savefig(self, fh, **_):
            fh.write(b"half")
            raise RuntimeError("matplotlib failed")

    with pytest.raises(RuntimeError):
        files.write_figure(tmp_path / "a.png", Broken())
    assert list(Path(tmp_path).iterdir()) == []


@pytest.mark.parametrize("text", [r'{"id": "\ud800"}', r'["\udfff"]', r'{"\uDBFF": 1}', r'"a\ud83d"', r'"\ude00b"'])
def test_json_with_a_lone_surrogate_is_refused_as_input(text):
    # a lone \uD800..\uDFFF escape parsed as a str no UTF-8 writer can encode: the server answered 500
    with pytest.raises(InputError, match="surrogate pair"):
        loads_json(text.encode(), "the body")


def test_json_surrogate_pairs_and_escaped_backslashes_are_fine():
    assert loads_json(br'["\ud83d\ude00", "\\ud800"]', "the body") == ["\U0001f600", "\\ud800"]
