"""README blocks written from the logs: replaced in place, all or none, never added or duplicated."""

import pytest

from precision_rl.analysis.readme_blocks import ReadmeBlock, update_readme
from precision_rl.errors import UserError

FIRST = ReadmeBlock("<!-- first -->", "<!-- end of first -->")
SECOND = ReadmeBlock("<!-- second -->", "<!-- end of second -->")


def test_blocks_are_replaced_in_place_and_the_file_is_written_only_when_it_changes(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{FIRST.render('old 1')}\nmiddle\n{SECOND.render('old 2')}\nrest\n")
    assert update_readme(readme, [(FIRST, "new 1"), (SECOND, "new 2")]) is True
    assert readme.read_text() == f"intro\n{FIRST.render('new 1')}\nmiddle\n{SECOND.render('new 2')}\nrest\n"
    assert update_readme(readme, [(FIRST, "new 1"), (SECOND, "new 2")]) is False


@pytest.mark.parametrize("text", ["no block\n", f"{FIRST.render('a')}\n{FIRST.render('b')}\n"])
def test_a_missing_or_doubled_block_is_refused_and_nothing_is_written(tmp_path, text):
    readme = tmp_path / "README.md"
    readme.write_text(text + SECOND.render("old"))
    with pytest.raises(UserError, match="exactly one block from '<!-- first -->'"):
        update_readme(readme, [(SECOND, "new"), (FIRST, "x")])
    assert readme.read_text() == text + SECOND.render("old")


def test_a_body_with_backslashes_is_written_as_it_is():
    assert FIRST.replace(FIRST.render("x"), r"\|π−μ\| \1") == FIRST.render(r"\|π−μ\| \1")
