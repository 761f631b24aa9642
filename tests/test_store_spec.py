"""Store specs (``herdsched.store.spec``): which strings name a database, which a state
directory, and the clear errors for the rest, passwords masked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from herdsched.errors import StateError
from herdsched.store.masking import hide_passwords_of
from herdsched.store.memory import MemoryStateStore
from herdsched.store.spec import (
    StoreSpecError,
    check_spec,
    is_database_spec,
    mask_password,
    open_store,
    store_location,
)
from herdsched.store.yaml_store import YamlStateStore


@pytest.mark.parametrize(
    "spec",
    [
        "postgresql://app@db:5432/app",
        "postgres://app:secret@db/app",
        "POSTGRESQL://db/app",
        "postgresql:///app?host=/var/run/postgresql",
        "host=db dbname=app user=app",
        "dbname=app",
        "user=app host=10.0.0.5",
        "service=herdsched",
        "port=5433 hostaddr=10.0.0.5",
    ],
)
def test_database_specs(spec: str) -> None:
    assert is_database_spec(spec)


@pytest.mark.parametrize(
    "spec",
    [".herdsched", "/var/lib/app/state", "state dir", "user=app", "a=b c", "x host=db", "C:\\x"],
)
def test_everything_else_is_a_state_directory(spec: str) -> None:
    assert not is_database_spec(spec)


def test_a_path_object_is_always_a_directory(tmp_path: Path) -> None:
    assert not is_database_spec(tmp_path / "postgresql:" / "db")
    store = open_store(tmp_path / "state")
    try:
        assert isinstance(store, YamlStateStore) and store.state_dir == tmp_path / "state"
    finally:
        store.close()


def test_a_directory_string_opens_the_yaml_store_with_its_options(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "state"), max_run_history=3, commit_delay=0)
    try:
        assert isinstance(store, YamlStateStore)
        assert store.max_run_history == 3 and store.commit_delay == 0
        assert store_location(store) == str(tmp_path / "state")
    finally:
        store.close()


@pytest.mark.parametrize(
    ("spec", "masked"),
    [
        ("postgresql://app:s3cret@db/app", "postgresql://app:***@db/app"),
        ("postgres://app:p%40ss@db:5432,db2:5432/app", "postgres://app:***@db:5432,db2:5432/app"),
        ("postgresql://db/app?password=s3cret&sslmode=require", "?password=***&sslmode=require"),
        ("host=db password=s3cret user=app", "host=db password=*** user=app"),
        ("host=db password='s3 cr\\'et' user=app", "host=db password=*** user=app"),
        ("mysql://root:s3cret@db/app", "mysql://root:***@db/app"),
        ("postgresql://app@db/app", "postgresql://app@db/app"),
        # spaces, quotes and "&" that libpq refuses or takes as part of the value
        ("postgresql://app:s3 cret@db/app", "postgresql://app:***@db/app"),
        ("postgresql://app:s3'cr\"et@db/app", "postgresql://app:***@db/app"),
        ('host=db password=s3"cret user=app', "host=db password=*** user=app"),
        ("host=db password=s3&cret user=app", "host=db password=*** user=app"),
        ("host=db password='s3 cret", "host=db password=***"),
    ],
)
def test_passwords_are_masked(spec: str, masked: str) -> None:
    assert masked in mask_password(spec)
    assert "s3" not in mask_password(spec) and "p%40ss" not in mask_password(spec)
    assert "cret" not in hide_passwords_of(spec, f"libpq cannot read {spec!r}")


def test_a_dsn_libpq_refuses_for_a_space_in_its_password_is_named_without_it() -> None:
    spec = "postgresql://herd:Wr ngPw@127.0.0.1:55432/postgres"
    psycopg = pytest.importorskip("psycopg")
    try:
        psycopg.conninfo.conninfo_to_dict(spec)
    except psycopg.ProgrammingError:
        pass  # this libpq refuses it, as libpq 18 does
    else:
        pytest.skip(f"libpq {psycopg.pq.version()} reads a space in a URL's password")
    with pytest.raises(StoreSpecError) as caught:
        check_spec(spec)
    assert "ngPw" not in str(caught.value) and "Wr " not in str(caught.value)
    assert "postgresql://herd:***@127.0.0.1:55432/postgres" in str(caught.value)


@pytest.mark.parametrize(
    "spec",
    [
        "postgresql://app:p\udce4ss@127.0.0.1:55432/hs",  # $'p\xe4ss' in a UTF-8 shell
        "host=127.0.0.1 password=p\udce4ss dbname=hs",
        "postgresql://app@127.0.0.1:55432/h\udcffs",
        "host=127.0.0.1 dbname=h\x00s",
        "postgresql://app:p%E9ss@127.0.0.1:55432/hs",  # percent-encoded Latin-1: a traceback
    ],
)
def test_a_dsn_holding_a_byte_that_is_no_utf8_is_named_without_its_password(spec: str) -> None:
    """A Latin-1 byte in a password (from a shell or a variable) ended the command line with a
    UnicodeEncodeError traceback from psycopg."""
    pytest.importorskip("psycopg")
    with pytest.raises(StoreSpecError, match="holds a byte that is no UTF-8 text") as caught:
        check_spec(spec)
    said = str(caught.value)
    assert "\udce4" not in said and "p\udce4ss" not in said  # the password is not shown
    assert ("password" not in spec and ":p" not in spec) or "***" in said
    # also the store's own constructor
    from herdsched.store.postgres import PostgresStateStore

    with pytest.raises(StoreSpecError, match="holds a byte that is no UTF-8 text"):
        PostgresStateStore(spec)


@pytest.mark.parametrize("spec", ["", "   ", "\n"])
def test_an_empty_spec_is_refused(spec: str) -> None:
    with pytest.raises(StoreSpecError, match="store spec is empty"):
        open_store(spec)


@pytest.mark.parametrize(
    ("spec", "scheme"),
    [
        ("mysql://root:s3cret@db/app", "mysql"),
        ("sqlite:///var/lib/app.db", "sqlite"),
        ("redis://cache:6379/0", "redis"),
        ("file:///var/lib/state", "file"),
    ],
)
def test_other_urls_are_refused_by_name(spec: str, scheme: str) -> None:
    with pytest.raises(StoreSpecError) as caught:
        open_store(spec)
    message = str(caught.value)
    assert f"no store for {scheme}:// URLs" in message
    assert mask_password(spec) in message and "s3cret" not in message
    assert isinstance(caught.value, StateError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("postgresql://app:s3cret@db.invalid/app?sslmode=bogus", 'invalid sslmode value: "bogus"'),
        (
            "host=a.invalid,b.invalid port=5432,5433 dbname=app password=s3cret require_auth=md4",
            'invalid require_auth value: "md4"',
        ),
        (
            "postgresql://app:s3cret@db.invalid/app?target_session_attrs=primry",
            'invalid target_session_attrs value: "primry"',
        ),
        ("host=/run/postgresql dbname=app gssencmode=never", 'invalid gssencmode value: "never"'),
    ],
)
def test_an_option_value_libpq_refuses_is_refused_before_any_connection(
    spec: str, words: str
) -> None:
    """libpq checks option values only when it connects; a spec check refuses them already,
    for hosts that do not even resolve (``.invalid``)."""
    with pytest.raises(StoreSpecError) as caught:
        check_spec(spec)
    assert (
        str(caught.value)
        == f"The PostgreSQL store's DSN {mask_password(spec)!r} is not valid: {words}"
    )
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    "spec",
    [
        "postgresql://app:s3cret@db.invalid/app?sslmode=verify-full&target_session_attrs=any",
        "host=a.invalid,b.invalid,c.invalid port=5432 dbname=app sslmode=require",
        "host=a.invalid,b.invalid port=5432,5433 hostaddr=10.0.0.1,10.0.0.2 dbname=app",
        "postgresql:///app?host=/run/postgresql&gssencmode=disable&channel_binding=prefer",
    ],
)
def test_good_option_values_pass_the_check(spec: str) -> None:
    assert check_spec(spec) == spec


def test_a_spec_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(StoreSpecError, match=r"must be a string or a path.*int 5432"):
        check_spec(5432)  # type: ignore[arg-type]


def test_a_namespace_is_refused_for_a_state_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreSpecError, match="namespace='prod' applies to a PostgreSQL store"):
        open_store(str(tmp_path / "state"), namespace="prod")
    assert not (tmp_path / "state").exists()


def test_without_psycopg_a_database_spec_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(sys.modules):
        if name == "psycopg" or name.startswith(("psycopg.", "herdsched.store.postgres")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg fails
    with pytest.raises(StateError) as caught:
        open_store("postgresql://app:s3cret@db/app")
    message = str(caught.value)
    assert "pip install 'herdsched[postgres]'" in message
    assert "postgresql://app:***@db/app" in message and "s3cret" not in message
    assert isinstance(caught.value.cause, ImportError)


def test_store_location_of_each_store(tmp_path: Path) -> None:
    assert store_location(MemoryStateStore()).startswith("memory")

    class Located(MemoryStateStore):
        location = "postgresql://app@db:5432/app (namespace default)"

    assert store_location(Located()) == Located.location


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        # the host/port pairs were garbled: "127.0.0.1,127.0.0.2:,55432"
        ("postgresql://app@db1:5432,db2:5433/hs", "postgresql://app@db1:5432,db2:5433/hs"),
        ("host=db1,db2 port=6432 dbname=hs", "postgresql://herd@db1:6432,db2:6432/hs"),
        # libpq's local socket was shown as localhost:5432; its port tells servers apart
        ("dbname=hs", "postgresql://herd@:5433/hs"),
        ("dbname=hs port=5432", "postgresql://herd@:5432/hs"),
        (
            "host=/var/run/postgresql dbname=hs",
            "postgresql://herd@:5433/hs (socket in /var/run/postgresql)",
        ),
        # a service was shown as a server at localhost
        ("service=reports", "service=reports"),
        ("postgresql://app:s3cret@db/hs", "postgresql://app@db:5433/hs"),
    ],
)
def test_a_dsn_is_described_as_libpq_reads_it_without_its_password(
    monkeypatch: pytest.MonkeyPatch, dsn: str, shown: str
) -> None:
    """What a DSN leaves out is what libpq takes from the environment: described as 5432,
    a DSN reaching the server of ``PGPORT=5433`` was taken for the one on 5432."""
    pytest.importorskip("psycopg")
    from herdsched.store.postgres.connection import describe_dsn

    for name in ("PGHOST", "PGHOSTADDR", "PGDATABASE", "PGSERVICE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGUSER", "herd")
    monkeypatch.setenv("PGPORT", "5433")
    assert describe_dsn(dsn) == shown


def test_a_service_libpq_does_not_know_is_not_called_an_unreachable_server() -> None:
    psycopg = pytest.importorskip("psycopg")
    from herdsched.store.postgres.connection import state_error

    error = state_error(
        psycopg.OperationalError('connection is bad: definition of service "nosuch" not found'),
        "connect",
        "service=nosuch",
    )
    assert "no such service in its service file" in str(error)
    assert "unreachable" not in str(error)


def test_a_dsn_naming_its_host_address_takes_no_host_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``PGHOST`` set, ``hostaddr=127.0.0.1`` and ``hostaddr=127.0.0.2`` were both
    described by ``PGHOST``: one key for two servers, so starting the second scheduler stopped
    the first. An OS user or ``PGUSER`` that is no UTF-8 raised a ``UnicodeDecodeError``."""
    pytest.importorskip("psycopg")
    from herdsched.store.postgres.connection import describe_dsn

    monkeypatch.setenv("PGHOST", "pg.internal")
    monkeypatch.setenv("PGPORT", "5433")
    monkeypatch.setenv("PGUSER", "\udce9quipe")  # the byte 0xe9 in the environment
    assert (
        describe_dsn("hostaddr=127.0.0.1 dbname=hs user=app")
        == "postgresql://app@127.0.0.1:5433/hs"
    )
    assert (
        describe_dsn("hostaddr=127.0.0.2 dbname=hs user=app")
        == "postgresql://app@127.0.0.2:5433/hs"
    )
    assert describe_dsn("host=db hostaddr=10.0.0.5 dbname=hs user=app").startswith(
        "postgresql://app@10.0.0.5:5433/"
    )
    assert describe_dsn("dbname=hs") == "postgresql://\ufffdquipe@pg.internal:5433/hs"
