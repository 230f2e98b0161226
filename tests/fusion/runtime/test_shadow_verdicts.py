"""The directed sets' verdicts (:mod:`fusion.runtime.shadow_verdicts`): named by the program,
the build, the sets and their seed; only a pass that reads back is trusted."""

from fusion.runtime.shadow_verdicts import VerdictStore


def test_a_verdict_is_named_by_program_build_sets_and_seed():
    key = VerdictStore.key([1, 2, 3], "build-a", 2, 0)
    assert len({key, VerdictStore.key([1, 2, 4], "build-a", 2, 0),
                VerdictStore.key([1, 2, 3], "build-b", 2, 0),
                VerdictStore.key([1, 2, 3], "build-a", 3, 0),
                VerdictStore.key([1, 2, 3], "build-a", 2, 1)}) == 5
    assert VerdictStore.key([1, 2, 3], "build-a", 2, 0) == key


def test_only_a_recorded_pass_that_reads_back_is_trusted(tmp_path):
    store = VerdictStore(tmp_path / "v")
    key = store.key([7], "b", 2, 0)
    assert not store.passed(key)
    store.record(key)
    assert store.passed(key)
    (tmp_path / "v" / f"{key}.json").write_text("{not json")
    assert not store.passed(key)
    other = store.key([8], "b", 2, 0)
    (tmp_path / "v" / f"{other}.json").write_text(
        f'{{"format": "hwgen-shadow-verdict", "key": "{key}", "passed": true}}')
    assert not store.passed(other)  # a file under another name is not its verdict


def test_a_verdict_that_cannot_be_written_is_not_an_error(tmp_path):
    (tmp_path / "file").write_text("")
    store = VerdictStore(tmp_path / "file" / "v")  # under a file: cannot be made
    store.record("k")
    assert not store.passed("k")
