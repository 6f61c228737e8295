from __future__ import annotations

import pytest

from knowledge import layered
from knowledge.layered import LayeredDict


def test_it_reads_as_the_dict_it_stands_for_after_changes():
    base = LayeredDict({1: "a", 2: "b", 3: "c"})

    changed = base.changed([2, 9], {4: "d", 1: "A"}).changed([4, 4], {2: "B", 5: "e"})

    assert dict(changed) == {1: "A", 2: "B", 3: "c", 5: "e"} and len(changed) == 4
    assert 4 not in changed and changed.get(4, "none") == "none" and changed[3] == "c"
    with pytest.raises(KeyError):
        changed[4]
    assert dict(base) == {1: "a", 2: "b", 3: "c"} and len(base) == 3  # never changed in place
    assert changed == {1: "A", 2: "B", 3: "c", 5: "e"}


def test_it_folds_a_large_layer_into_a_new_base(monkeypatch):
    monkeypatch.setattr(layered, "FOLD_MIN", 2)
    base = LayeredDict({key: key for key in range(10)})

    small = base.changed([0], {})
    large = small.changed([1, 2], {20: 20})

    assert small._layer and not large._layer
    assert dict(large) == {key: key for key in [*range(3, 10), 20]} and len(large) == 8
    assert large.folded() is large and dict(small.folded()) == dict(small)


def test_a_plain_dict_is_wrapped_on_its_first_change_and_left_unchanged():
    from knowledge.layered import changed, flattened

    base = {1: "a", 2: "b"}
    after = changed(base, [1], {3: "c"})

    assert dict(after) == {2: "b", 3: "c"} and base == {1: "a", 2: "b"}
    assert flattened(after) == {2: "b", 3: "c"} and flattened(base) is base
