"""Target-language tags: found at the start of a line only, split off whole, read back from a vocabulary."""

from __future__ import annotations

from pipeline.data import tags


def test_a_tag_is_split_off_the_start_of_a_line_with_its_space():
    assert tags.split_tag("<2ms> Apa khabar?") == ("<2ms> ", "Apa khabar?")
    assert tags.split_tag("<2pt_BR>") == ("<2pt_BR>", "")
    assert tags.split_tag("say <2ms> here") == ("", "say <2ms> here")  # only at the start
    assert tags.split_tag("<2 ms> x") == ("", "<2 ms> x")
    assert tags.tag_of("<2id> Halo") == "id" and tags.tag_of("Halo") is None


def test_lines_without_tags_come_back_as_they_are():
    assert tags.split_tags(["a", "b"]) == (["", ""], ["a", "b"])
    assert tags.split_tags(["<2id> a", "b"]) == (["<2id> ", ""], ["a", "b"])
    assert tags.tagged_lines(["a", "b c"], "ms") == ["<2ms> a", "<2ms> b c"]


def test_a_vocabularys_tags_are_its_pieces_of_the_tag_shape():
    assert tags.tags_in(["▁a", "<2ms>", "<2id>", "▁<2xx>", "<sep>"]) == {"ms": "<2ms>", "id": "<2id>"}
