"""TokenVerifier: algorithms, keys, rotation, JWKS over a real HTTP server, claims (PROTOCOL.md §5)."""

from __future__ import annotations

import asyncio
import base64
import json
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from gateway.config.loading import load_settings
from gateway.config.schema import TokenSettings
from gateway.connection.tokens import (
    ConnectToken,
    InvalidToken,
    KeysUnavailable,
    ServerSideSub,
    SubscriptionOverride,
    TokenExpired,
    TokenVerifier,
)

NOW = 1_700_000_000.0
SECRET = "s" * 64  # long enough for HS512 without PyJWT's key-length warning when minting
HS = ("HS256", "HS384", "HS512")
RS = ("RS256", "RS384", "RS512")
ES = ("ES256", "ES384", "ES512")
JWKS = (*RS, *ES, "EdDSA")


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def hmac_verifier(clock: Clock | None = None, /, **kw: Any) -> TokenVerifier:
    settings = TokenSettings(hmac_secret_key=SECRET, algorithms=HS, **kw)
    return TokenVerifier(settings, now=clock or Clock())


def mint(claims: dict[str, Any], key: Any = SECRET, alg: str = "HS256", **headers: Any) -> str:
    return jwt.encode(claims, key, algorithm=alg, headers=headers or None)


# --- algorithms and keys ---------------------------------------------------------------------


@pytest.mark.parametrize("alg", HS)
async def test_hmac_algorithms(alg: str) -> None:
    token = await hmac_verifier().verify_connect(mint({"sub": "42"}, alg=alg))
    assert token == ConnectToken(user="42", expire_at=None, info=None, channels=(), subs={}, meta=None)


async def test_short_hmac_secret_verifies_without_warnings() -> None:
    verifier = TokenVerifier(TokenSettings(hmac_secret_key="change-me", algorithms=HS), now=Clock())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        token = mint({"sub": "1"}, key="change-me")
    assert (await verifier.verify_connect(token)).user == "1"  # filterwarnings=error would fail here


async def test_wrong_hmac_secret_rejected() -> None:
    with pytest.raises(InvalidToken):
        await hmac_verifier().verify_connect(mint({"sub": "1"}, key="x" * 64))


@pytest.mark.parametrize("alg", RS)
async def test_rsa(rsa_key: rsa.RSAPrivateKey, alg: str) -> None:
    verifier = TokenVerifier(TokenSettings(rsa_public_key=public_pem(rsa_key), algorithms=RS), now=Clock())
    assert (await verifier.verify_connect(mint({"sub": "u"}, rsa_key, alg))).user == "u"


async def test_ecdsa(ec_key: ec.EllipticCurvePrivateKey) -> None:
    verifier = TokenVerifier(TokenSettings(ecdsa_public_key=public_pem(ec_key), algorithms=ES), now=Clock())
    assert (await verifier.verify_connect(mint({"sub": "u"}, ec_key, "ES256"))).user == "u"
    p384 = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(InvalidToken):  # ES384 is allowed, but the configured key is P-256
        await verifier.verify_connect(mint({"sub": "u"}, p384, "ES384"))
    other = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(InvalidToken):
        await verifier.verify_connect(mint({"sub": "u"}, other, "ES256"))


async def test_alg_confusion_hs256_signed_with_rsa_public_pem(rsa_key: rsa.RSAPrivateKey) -> None:
    pem = public_pem(rsa_key)
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")
    body = base64.urlsafe_b64encode(b'{"sub":"admin"}').rstrip(b"=")
    import hashlib
    import hmac

    sig = hmac.new(pem.encode(), header + b"." + body, hashlib.sha256).digest()
    forged = b".".join([header, body, base64.urlsafe_b64encode(sig).rstrip(b"=")]).decode()
    only_rsa = TokenVerifier(TokenSettings(rsa_public_key=pem, algorithms=RS), now=Clock())
    with pytest.raises(InvalidToken):
        await only_rsa.verify_connect(forged)
    both = TokenVerifier(
        TokenSettings(hmac_secret_key=SECRET, rsa_public_key=pem, algorithms=(*HS, *RS)), now=Clock()
    )
    with pytest.raises(InvalidToken):
        await both.verify_connect(forged)


async def test_alg_none_rejected() -> None:
    token = jwt.encode({"sub": "admin"}, "", algorithm="none")
    with pytest.raises(InvalidToken):
        await hmac_verifier().verify_connect(token)


async def test_algorithm_outside_config_rejected() -> None:
    verifier = TokenVerifier(TokenSettings(hmac_secret_key=SECRET, algorithms=("HS256",)), now=Clock())
    with pytest.raises(InvalidToken):
        await verifier.verify_connect(mint({"sub": "1"}, alg="HS512"))


async def test_no_keys_configured_rejects_everything() -> None:
    with pytest.raises(InvalidToken):
        await TokenVerifier(TokenSettings(), now=Clock()).verify_connect(mint({"sub": "1"}))


@pytest.mark.parametrize("garbage", ["", "abc", "a.b", "a.b.c", "....", "eyJhbGciOiJIUzI1NiJ9.e30"])
async def test_malformed(garbage: str) -> None:
    with pytest.raises(InvalidToken):
        await hmac_verifier().verify_connect(garbage)


async def test_claims_not_an_object() -> None:
    token = jwt.api_jws.encode(b"[1,2]", SECRET, algorithm="HS256")
    with pytest.raises(InvalidToken, match="not an object"):
        await hmac_verifier().verify_connect(token)


async def test_error_messages_never_contain_token_or_key() -> None:
    bad = mint({"sub": "1"}, key="y" * 64)
    with pytest.raises(InvalidToken) as info:
        await hmac_verifier().verify_connect(bad)
    assert bad not in str(info.value)
    assert SECRET not in str(info.value)
    assert "y" * 10 not in repr(info.value)


async def test_skip_signature_still_checks_claims() -> None:
    verifier = TokenVerifier(TokenSettings(), now=Clock(), skip_signature=True)
    assert (await verifier.verify_connect(mint({"sub": "7"}, key="z" * 64))).user == "7"
    with pytest.raises(TokenExpired):
        await verifier.verify_connect(mint({"sub": "7", "exp": int(NOW) - 1}, key="z" * 64))


# --- rotation --------------------------------------------------------------------------------


async def test_previous_hmac_key_until_valid_until() -> None:
    clock = Clock()
    old = "o" * 64
    verifier = hmac_verifier(
        clock, hmac_previous_secret_key=old, hmac_previous_secret_key_valid_until=int(NOW) + 10
    )
    token = mint({"sub": "1"}, key=old, alg="HS384")
    assert (await verifier.verify_connect(token)).user == "1"
    assert (await verifier.verify_connect(mint({"sub": "2"}))).user == "2"
    clock.t = NOW + 10
    with pytest.raises(InvalidToken):
        await verifier.verify_connect(token)


async def test_previous_hmac_key_forever_when_valid_until_zero() -> None:
    verifier = hmac_verifier(Clock(NOW * 2), hmac_previous_secret_key="o" * 64)
    assert (await verifier.verify_connect(mint({"sub": "1"}, key="o" * 64))).user == "1"


# --- time claims -----------------------------------------------------------------------------


async def test_exp_with_fake_clock() -> None:
    clock = Clock()
    verifier = hmac_verifier(clock)
    token = mint({"sub": "1", "exp": int(NOW) + 60})
    assert (await verifier.verify_connect(token)).expire_at == int(NOW) + 60
    clock.t = NOW + 60
    with pytest.raises(TokenExpired):
        await verifier.verify_connect(token)


async def test_expired_token_with_bad_signature_is_invalid_not_expired() -> None:
    with pytest.raises(InvalidToken):
        await hmac_verifier().verify_connect(mint({"sub": "1", "exp": 1}, key="q" * 64))


async def test_nbf_in_future_rejected() -> None:
    clock = Clock()
    token = mint({"sub": "1", "nbf": int(NOW) + 5})
    with pytest.raises(InvalidToken, match="nbf"):
        await hmac_verifier(clock).verify_connect(token)
    clock.t = NOW + 5
    assert (await hmac_verifier(clock).verify_connect(token)).user == "1"


@pytest.mark.parametrize("claims", [{"exp": "soon"}, {"exp": True}, {"nbf": "x"}, {"expire_at": "x"}])
async def test_bad_time_claim_types(claims: dict[str, Any]) -> None:
    with pytest.raises(InvalidToken):
        await hmac_verifier().verify_connect(mint({"sub": "1", **claims}))


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"exp": NOW + 100}, int(NOW) + 100),
        ({"exp": NOW + 100, "expire_at": NOW + 50}, int(NOW) + 50),
        ({"exp": NOW + 100, "expire_at": 0}, None),
        ({"expire_at": NOW - 50}, int(NOW) - 50),  # the caller answers 109/110
        ({}, None),
    ],
)
async def test_expire_at(claims: dict[str, Any], expected: int | None) -> None:
    assert (await hmac_verifier().verify_connect(mint({"sub": "1", **claims}))).expire_at == expected


# --- audience / issuer -----------------------------------------------------------------------


async def test_aud_accepted_when_no_audience_configured() -> None:
    assert (await hmac_verifier().verify_connect(mint({"sub": "1", "aud": "whatever"}))).user == "1"


@pytest.mark.parametrize(
    ("config", "aud", "ok"),
    [
        ({"audience": "gw"}, "gw", True),
        ({"audience": "gw"}, ["x", "gw"], True),
        ({"audience": "gw"}, "gw2", False),
        ({"audience": "gw"}, None, False),
        ({"audience_regex": r"^tenant-\d+$"}, "tenant-7", True),
        ({"audience_regex": r"^tenant-\d+$"}, "tenant-x", False),
    ],
)
async def test_audience(config: dict[str, str], aud: object, ok: bool) -> None:
    claims: dict[str, Any] = {"sub": "1"} if aud is None else {"sub": "1", "aud": aud}
    verifier = hmac_verifier(**config)
    if ok:
        assert (await verifier.verify_connect(mint(claims))).user == "1"
    else:
        with pytest.raises(InvalidToken, match="audience"):
            await verifier.verify_connect(mint(claims))


@pytest.mark.parametrize(
    ("config", "iss", "ok"),
    [
        ({"issuer": "auth"}, "auth", True),
        ({"issuer": "auth"}, "evil", False),
        ({"issuer": "auth"}, None, False),
        ({"issuer_regex": r"^https://auth\.example\.com/"}, "https://auth.example.com/t1", True),
        ({"issuer_regex": r"^https://auth\.example\.com/"}, "https://evil.com/", False),
    ],
)
async def test_issuer(config: dict[str, str], iss: str | None, ok: bool) -> None:
    claims: dict[str, Any] = {"sub": "1"} if iss is None else {"sub": "1", "iss": iss}
    verifier = hmac_verifier(**config)
    if ok:
        assert (await verifier.verify_connect(mint(claims))).user == "1"
    else:
        with pytest.raises(InvalidToken, match="issuer"):
            await verifier.verify_connect(mint(claims))


# --- connection claims -----------------------------------------------------------------------


async def test_user_id_claim() -> None:
    verifier = hmac_verifier(user_id_claim="user.id")
    assert (await verifier.verify_connect(mint({"sub": "ignored", "user": {"id": 99}}))).user == "99"
    assert (await verifier.verify_connect(mint({"sub": "ignored"}))).user == ""
    assert (await hmac_verifier(user_id_claim="uid").verify_connect(mint({"uid": "a"}))).user == "a"


async def test_missing_sub_is_anonymous_and_bad_sub_type_invalid() -> None:
    assert (await hmac_verifier().verify_connect(mint({}))).user == ""
    with pytest.raises(InvalidToken):
        await hmac_verifier().verify_connect(mint({"sub": 5}, alg="HS256"))


async def test_connection_claims_info_channels_meta() -> None:
    token = mint(
        {"sub": "1", "info": {"name": "Ann"}, "channels": ["a", "b:c"], "meta": {"tenant": 3}},
    )
    parsed = await hmac_verifier().verify_connect(token)
    assert json.loads(parsed.info or b"") == {"name": "Ann"}
    assert parsed.channels == ("a", "b:c")
    assert json.loads(parsed.meta or b"") == {"tenant": 3}


async def test_b64info_takes_precedence() -> None:
    token = mint({"sub": "1", "info": {"x": 1}, "b64info": base64.b64encode(b"\x00raw").decode()})
    assert (await hmac_verifier().verify_connect(token)).info == b"\x00raw"


async def test_subs_claim_and_channels_ignored() -> None:
    token = mint(
        {
            "sub": "1",
            "channels": ["ignored"],
            "subs": {
                "news": {"info": {"a": 1}, "b64data": base64.b64encode(b"bin").decode()},
                "task_user:1": {
                    "data": [1],
                    "override": {"presence": {"value": True}, "join_leave": {"value": False}},
                },
                "plain": {},
            },
        }
    )
    parsed = await hmac_verifier().verify_connect(token)
    assert parsed.channels == ()
    assert parsed.subs["news"] == ServerSideSub(info=b'{"a":1}', data=b"bin", override=None)
    assert parsed.subs["task_user:1"] == ServerSideSub(
        info=None, data=b"[1]", override=SubscriptionOverride(presence=True, join_leave=False)
    )
    assert parsed.subs["plain"] == ServerSideSub()


async def test_connection_token_with_channel_claim_rejected() -> None:
    with pytest.raises(InvalidToken, match="channel"):
        await hmac_verifier().verify_connect(mint({"sub": "1", "channel": "news"}))


@pytest.mark.parametrize(
    "claims",
    [
        {"channels": "news"},
        {"channels": [1]},
        {"subs": ["news"]},
        {"subs": {"news": 1}},
        {"subs": {"news": {"override": {"presence": True}}}},
        {"subs": {"news": {"override": {"presence": {"value": "yes"}}}}},
        {"b64info": "***"},
        {"b64info": 5},
    ],
)
async def test_bad_claim_types(claims: dict[str, Any]) -> None:
    with pytest.raises(InvalidToken):
        await hmac_verifier().verify_connect(mint({"sub": "1", **claims}))


# --- subscription tokens ---------------------------------------------------------------------


async def test_subscribe_token_fields() -> None:
    token = mint(
        {
            "sub": "1",
            "channel": "$task_detail:9",
            "client": "c-1",
            "exp": NOW + 30,
            "info": {"role": "viewer"},
            "data": {"welcome": True},
            "override": {"force_recovery": {"value": True}, "force_positioning": {"value": False}},
        }
    )
    parsed = await hmac_verifier().verify_subscribe(token)
    assert parsed.user == "1"
    assert parsed.channel == "$task_detail:9"
    assert parsed.client == "c-1"
    assert parsed.expire_at == int(NOW) + 30
    assert parsed.info == b'{"role":"viewer"}'
    assert parsed.data == b'{"welcome":true}'
    assert parsed.override == SubscriptionOverride(force_recovery=True, force_positioning=False)


async def test_subscribe_token_b64data_and_defaults() -> None:
    token = mint({"sub": "", "channel": "ch", "b64data": base64.b64encode(b"\x01").decode(), "expire_at": 0})
    parsed = await hmac_verifier().verify_subscribe(token)
    assert (parsed.user, parsed.client, parsed.expire_at, parsed.info, parsed.data, parsed.override) == (
        "",
        "",
        None,
        None,
        b"\x01",
        None,
    )


@pytest.mark.parametrize("claims", [{}, {"channel": ""}, {"channel": 3}, {"channel": "c", "client": 1}])
async def test_subscribe_token_bad_channel_or_client(claims: dict[str, Any]) -> None:
    with pytest.raises(InvalidToken):
        await hmac_verifier().verify_subscribe(mint({"sub": "1", **claims}))


async def test_subscribe_token_expired() -> None:
    with pytest.raises(TokenExpired):
        await hmac_verifier().verify_subscribe(mint({"sub": "1", "channel": "c", "exp": NOW - 1}))


# --- JWKS over a real HTTP server ------------------------------------------------------------


@dataclass
class JwksServer:
    url: str
    keys: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    status: int = 200


@pytest.fixture
async def jwks_server() -> AsyncIterator[JwksServer]:
    state = JwksServer(url="")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        state.requests += 1
        body = json.dumps({"keys": state.keys}).encode()
        writer.write(
            f"HTTP/1.1 {state.status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    state.url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    async with server:
        yield state


def jwk(public_key: Any, kid: str, algorithm: type[Any], **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = algorithm.to_jwk(public_key, as_dict=True)
    return {**data, "kid": kid, **extra}


def jwks_verifier(server: JwksServer, clock: Clock, **kw: Any) -> TokenVerifier:
    settings = TokenSettings(jwks_public_endpoint=server.url, algorithms=JWKS)
    return TokenVerifier(settings, now=clock, **kw)


async def test_jwks_rsa_ec_eddsa(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    ed_key = ed25519.Ed25519PrivateKey.generate()
    jwks_server.keys = [
        jwk(rsa_key.public_key(), "r1", RSAAlgorithm),
        jwk(ec_key.public_key(), "e1", ECAlgorithm),
        jwk(ed_key.public_key(), "d1", OKPAlgorithm),
        {"kty": "oct", "kid": "junk"},
    ]
    verifier = jwks_verifier(jwks_server, Clock())
    assert (await verifier.verify_connect(mint({"sub": "r"}, rsa_key, "RS512", kid="r1"))).user == "r"
    assert (await verifier.verify_connect(mint({"sub": "e"}, ec_key, "ES256", kid="e1"))).user == "e"
    assert (await verifier.verify_connect(mint({"sub": "d"}, ed_key, "EdDSA", kid="d1"))).user == "d"
    assert jwks_server.requests == 1  # cached by kid
    with pytest.raises(InvalidToken, match="does not match"):  # alg must fit the key's type
        await verifier.verify_connect(mint({"sub": "e"}, rsa_key, "RS256", kid="e1"))
    with pytest.raises(InvalidToken):  # missing kid
        await verifier.verify_connect(mint({"sub": "r"}, rsa_key, "RS256"))


async def test_jwks_ignores_static_keys_and_hmac(jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey) -> None:
    jwks_server.keys = [jwk(rsa_key.public_key(), "r1", RSAAlgorithm)]
    settings, _ = load_settings(
        None,
        {
            "CENTRIFUGO_CLIENT_TOKEN_JWKS_PUBLIC_ENDPOINT": jwks_server.url,
            "CENTRIFUGO_CLIENT_TOKEN_HMAC_SECRET_KEY": SECRET,
        },
    )
    verifier = TokenVerifier(settings.client.token, now=Clock())
    with pytest.raises(InvalidToken):
        await verifier.verify_connect(mint({"sub": "1"}, kid="r1"))
    assert (await verifier.verify_connect(mint({"sub": "1"}, rsa_key, "RS256", kid="r1"))).user == "1"


async def test_jwks_unknown_kid_refetch_throttled(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    clock = Clock()
    jwks_server.keys = [jwk(rsa_key.public_key(), "r1", RSAAlgorithm)]
    verifier = jwks_verifier(jwks_server, clock, jwks_refetch_interval=10)
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = mint({"sub": "1"}, rotated, "RS256", kid="r2")
    with pytest.raises(InvalidToken, match="unknown"):
        await verifier.verify_connect(token)
    jwks_server.keys.append(jwk(rotated.public_key(), "r2", RSAAlgorithm))
    with pytest.raises(InvalidToken, match="unknown"):
        await verifier.verify_connect(token)  # within the interval: no refetch
    assert jwks_server.requests == 1
    clock.t += 10
    assert (await verifier.verify_connect(token)).user == "1"
    assert jwks_server.requests == 2


async def test_jwks_concurrent_unknown_kids_fetch_once(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    jwks_server.keys = [jwk(rsa_key.public_key(), "r1", RSAAlgorithm)]
    verifier = jwks_verifier(jwks_server, Clock())
    token = mint({"sub": "1"}, rsa_key, "RS256", kid="r1")
    results = await asyncio.gather(*(verifier.verify_connect(token) for _ in range(20)))
    assert {r.user for r in results} == {"1"}
    assert jwks_server.requests == 1


async def test_jwks_endpoint_down_is_temporary(jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey) -> None:
    clock = Clock()
    jwks_server.status = 503
    verifier = jwks_verifier(jwks_server, clock)
    token = mint({"sub": "1"}, rsa_key, "RS256", kid="r1")
    with pytest.raises(KeysUnavailable):
        await verifier.verify_connect(token)
    with pytest.raises(KeysUnavailable):  # throttled, still temporary
        await verifier.verify_connect(token)
    assert jwks_server.requests == 1
    jwks_server.status = 200
    jwks_server.keys = [jwk(rsa_key.public_key(), "r1", RSAAlgorithm)]
    clock.t += 10
    assert (await verifier.verify_connect(token)).user == "1"


async def test_jwks_stale_cache_refreshed_but_kept_on_failure(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    clock = Clock()
    jwks_server.keys = [jwk(rsa_key.public_key(), "r1", RSAAlgorithm)]
    verifier = jwks_verifier(jwks_server, clock, jwks_cache_ttl=100)
    token = mint({"sub": "1"}, rsa_key, "RS256", kid="r1")
    await verifier.verify_connect(token)
    clock.t += 100
    jwks_server.status = 500
    assert (await verifier.verify_connect(token)).user == "1"
    assert jwks_server.requests == 2


async def test_jwks_with_injected_http_client(
    jwks_server: JwksServer, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    import httpx

    jwks_server.keys = [jwk(ec_key.public_key(), "e1", ECAlgorithm, alg="ES256")]
    async with httpx.AsyncClient() as http:
        verifier = jwks_verifier(jwks_server, Clock(), http=http)
        assert (await verifier.verify_connect(mint({"sub": "1"}, ec_key, "ES256", kid="e1"))).user == "1"


# --- settings integration --------------------------------------------------------------------


async def test_verifier_from_loaded_settings(ec_key: ec.EllipticCurvePrivateKey) -> None:
    env = {
        "CENTRIFUGO_CLIENT_TOKEN_ECDSA_PUBLIC_KEY": public_pem(ec_key),
        "TASKCAST_CLIENT_TOKEN_AUDIENCE": "gw",
    }
    settings, _ = load_settings(None, env)
    assert settings.client.token.algorithms == ES
    verifier = TokenVerifier(settings.client.token, now=Clock())
    assert (await verifier.verify_connect(mint({"sub": "1", "aud": "gw"}, ec_key, "ES256"))).user == "1"


def test_constructor_rejects_unloadable_key() -> None:
    with pytest.raises(ValueError, match="key"):
        TokenVerifier(TokenSettings(rsa_public_key="not a pem", algorithms=RS))
