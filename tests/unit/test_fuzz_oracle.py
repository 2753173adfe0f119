"""The fuzz campaign's oracle (tests/support/fuzzing.py) keeps its own copy of which output columns
are text, so that it judges profview from outside. This checks, in the fast tier, that the copy
still agrees with the contract: a text column the oracle does not know makes every fuzz case of
that file fail in the timed tier, long after the change that added the column."""

from profiler.formats.tables import CSV_COLUMNS, OPTIONAL_TEXT, TEXT_DTYPES
from tests.support import fuzzing

CONTRACT_TEXT = set(TEXT_DTYPES) | set(OPTIONAL_TEXT)


def test_the_oracle_reads_as_text_exactly_the_contracts_text_columns():
    for kind in fuzzing.REQUIRED_COLUMNS:
        columns = set(CSV_COLUMNS[kind])
        contract = columns & CONTRACT_TEXT
        oracle = columns & fuzzing.TEXT_COLUMNS
        only_contract, only_oracle = contract - oracle, oracle - contract
        assert oracle == contract, f"{kind}: only the contract has {only_contract}, only the oracle {only_oracle}"


def test_the_oracle_requires_what_the_readers_require():
    from profiler.formats.tables import CSV_REQUIRED

    for kind, required in fuzzing.REQUIRED_COLUMNS.items():
        assert required == set(CSV_REQUIRED[kind][0]), kind
