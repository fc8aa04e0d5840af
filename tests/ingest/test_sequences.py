from ingest.sequences import covered, holes, merge, runs


def test_runs_collapse_consecutive_numbers() -> None:
    assert runs([1, 2, 3, 7, 9, 10]) == [(1, 3), (7, 7), (9, 10)]
    assert runs([]) == []


def test_merge_joins_overlapping_and_adjacent_ranges() -> None:
    assert merge([(5, 9), (0, 3), (4, 4), (12, 12), (8, 10)]) == [(0, 10), (12, 12)]


def test_covered_finds_members_inside_ranges() -> None:
    assert covered([(0, 3), (10, 12)], [2, 3, 4, 9, 10, 13]) == {2, 3, 10}
    assert covered([], [1]) == set()


def test_holes_are_the_gaps_between_ranges() -> None:
    assert holes([(0, 3), (6, 6), (7, 9), (20, 21)]) == [(4, 5), (10, 19)]
    assert holes([(0, 9)]) == []
