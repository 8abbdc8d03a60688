"""The tokens file: what is accepted (YAML list, sha256 digests, Kubernetes static token CSV), that every
mistake names the entry and the field, and what each role may do."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from broker.config.settings import load_tokens
from broker.core.errors import ConfigError
from broker.tenancy.auth import Principal, Role, parse_static_token_csv, parse_tokens

PLAIN = "a-plain-token-0123456789"


def test_plain_and_sha256_tokens_authenticate_and_wrong_ones_do_not() -> None:
    hashed = "b-hashed-token-0123456789"
    table = parse_tokens(
        [
            {"name": "alice", "tenant": "ml-research", "role": "user", "token": PLAIN},
            {
                "name": "bob",
                "tenant": "vision",
                "role": "viewer",
                "token": "sha256:" + hashlib.sha256(hashed.encode()).hexdigest().upper(),
            },
        ],
        "tokens.yaml",
    )
    assert table.authenticate(PLAIN) == Principal("alice", "ml-research", Role.USER)
    assert table.authenticate(hashed) == Principal("bob", "vision", Role.VIEWER)
    assert table.authenticate(PLAIN + "x") is None
    assert table.authenticate("sha256:" + hashlib.sha256(hashed.encode()).hexdigest()) is None


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([], "expected a non-empty list"),
        (
            [{"name": "a", "tenant": "t", "role": "root", "token": PLAIN}],
            "[0] (a): role: one of user, admin, viewer",
        ),
        (
            [{"name": "a", "tenant": "T_1", "role": "user", "token": PLAIN}],
            "[0] (a): tenant: required, a DNS label",
        ),
        ([{"name": "a", "tenant": "t", "role": "user", "token": "short"}], "[0] (a): token: at least 16"),
        (
            [{"name": "a", "tenant": "t", "role": "user", "token": "sha256:abc"}],
            "token: sha256: must be followed",
        ),
        (
            [{"name": "a", "tenant": "t", "role": "user", "token": PLAIN, "group": "x"}],
            "[0]: group: unknown field",
        ),
        (
            [
                {"name": "a", "tenant": "t", "role": "user", "token": PLAIN},
                {"name": "b", "tenant": "u", "role": "admin", "token": PLAIN},
            ],
            "[1] (b): token: the same token as 'a'",
        ),
    ],
)
def test_a_bad_tokens_file_names_the_entry_and_the_field(entries: list[object], message: str) -> None:
    with pytest.raises(ValueError, match=r"tokens\.yaml") as info:
        parse_tokens(entries, "tokens.yaml")
    assert message in str(info.value)


def test_a_kubernetes_static_token_csv_maps_groups_to_tenant_and_role(tmp_path: Path) -> None:
    text = f'{PLAIN},alice,1001,"system:authenticated,gpufed:tenant:ml-research,gpufed:role:admin"\n\n'
    assert parse_static_token_csv(text, "t.csv").authenticate(PLAIN) == Principal(
        "alice", "ml-research", Role.ADMIN
    )
    path = tmp_path / "tokens.csv"
    path.write_text(f"{PLAIN},alice,1001,gpufed:role:user\n")
    with pytest.raises(ConfigError, match=r"line 1: groups: needs a group gpufed:tenant:<tenant>"):
        load_tokens(path)
    with pytest.raises(ConfigError, match=r"auth.tokensFile: .*missing.yaml: cannot read"):
        load_tokens(tmp_path / "missing.yaml")


def test_roles() -> None:
    user, admin, viewer = (Principal("p", "t", r) for r in (Role.USER, Role.ADMIN, Role.VIEWER))
    assert (user.can_submit, admin.can_submit, viewer.can_submit) == (True, True, False)
    assert (user.may_read("other"), admin.may_read("other"), viewer.may_read("other")) == (False, True, True)
    assert (
        user.may_cancel("t"),
        user.may_cancel("other"),
        admin.may_cancel("other"),
        viewer.may_cancel("t"),
    ) == (
        True,
        False,
        True,
        False,
    )
