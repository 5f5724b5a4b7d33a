"""experiments/studies/bluff_parts.py: a bluff's parts, paired against truthful."""

from __future__ import annotations

import pytest

from experiments.studies.bluff_parts import Args, main, parsed


def test_flags_and_numbers_parse_and_a_stance_blind_allocator_pays_no_stance(capsys):
    assert parsed(("heed_escalation=false", "headroom=0.25")) == {"heed_escalation": False, "headroom": 0.25}
    main(Args(allocator="uniform_rule", seeds=3))
    out = capsys.readouterr().out
    assert out.count("welfare") == 3
    # uniform_rule reads no stance: accepting where truthful escalates changes nothing, paired seed by seed
    assert "crisis search x1, accept: +0.0 ± 0.0 over truthful" in out


def test_an_unknown_parameter_is_refused():
    with pytest.raises(ValueError, match=r"has no parameter\(s\) \[.heed_escalation.\]"):
        main(Args(allocator="uniform_rule", param=("heed_escalation=false",), seeds=2))
