#!/usr/bin/env python3
"""Identity providers played by libraries nobody here wrote: keys from `cryptography`, JWKS
documents from PyJWT's JWK export, tokens signed by PyJWT. The integration test
tests/identity_providers.rs drives it; scripts/setup.sh installs its pinned PyJWT and
cryptography into a virtual environment under target/.

  pyjwt_mint.py DIR jwks            print {"issuer name": JWKS document} (keys made once in DIR)
  pyjwt_mint.py DIR tokens < SPECS  print one token per spec, in order

A spec: {"key": NAME, "alg": "RS256", "claims": {...}} with optionally "headers" (added to the
protected header), "payload" (the exact payload text instead of "claims"), or "hmac_public": true
(an attacker's HS256 keyed with the key's public PEM, signed with hmac since PyJWT refuses to).
"""
import base64
import hashlib
import hmac
import json
import os
import sys

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

# name: (type, kid, use, alg named in the JWK)
KEYS = {
    "kc-rs": ("rsa", "kc-rs", "sig", "RS256"),
    "kc-es": ("ec", "kc-es", "sig", "ES256"),
    "kc-ed": ("ed", "kc-ed", "sig", "EdDSA"),
    "kc-enc": ("rsa", "kc-enc", "enc", "RSA-OAEP"),
    "a0-rs": ("rsa", "a0-rs", None, None),
    "evil-rs": ("rsa", "kc-rs", "sig", "RS256"),
    "weak-rs": ("rsa1024", "weak-rs", "sig", "RS256"),
    "kc-rs-2": ("rsa", "kc-rs-2", "sig", "RS256"),
}
ISSUERS = {
    "keycloak": ["kc-rs", "kc-es", "kc-ed", "kc-enc"],
    "keycloak-rotated": ["kc-rs-2", "kc-rs", "kc-enc"],
    "auth0": ["a0-rs"],
    "evil": ["evil-rs"],
    "weak": ["weak-rs"],
}


KEY_CACHE = {}


def private_key(directory, name):
    if name not in KEY_CACHE:
        KEY_CACHE[name] = load_or_make_key(directory, name)
    return KEY_CACHE[name]


def load_or_make_key(directory, name):
    path = os.path.join(directory, name + ".pem")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return serialization.load_pem_private_key(f.read(), password=None)
    kind = KEYS[name][0]
    if kind == "rsa":
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif kind == "rsa1024":
        key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    elif kind == "ec":
        key = ec.generate_private_key(ec.SECP256R1())
    else:
        key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return key


def public_jwk(directory, name):
    kind, kid, use, alg = KEYS[name]
    public = private_key(directory, name).public_key()
    export = {"rsa": RSAAlgorithm, "rsa1024": RSAAlgorithm, "ec": ECAlgorithm, "ed": OKPAlgorithm}[kind]
    jwk = export.to_jwk(public, as_dict=True)
    jwk["kid"] = kid
    if use:
        jwk["use"] = use
    if alg:
        jwk["alg"] = alg
    return jwk


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(directory, spec):
    name = spec["key"]
    kid = KEYS[name][1]
    payload = spec["payload"].encode() if "payload" in spec else json.dumps(spec["claims"]).encode()
    if spec.get("hmac_public"):
        pem = private_key(directory, name).public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
        signing_input = header + "." + b64(payload)
        return signing_input + "." + b64(hmac.new(pem, signing_input.encode(), hashlib.sha256).digest())
    headers = {"kid": kid}
    for k, v in spec.get("headers", {}).items():
        headers[k] = public_jwk(directory, v) if k == "jwk" else v
    return jwt.api_jws.PyJWS().encode(payload, private_key(directory, name), algorithm=spec["alg"], headers=headers)


def main():
    directory, command = sys.argv[1], sys.argv[2]
    os.makedirs(directory, exist_ok=True)
    if command == "jwks":
        print(json.dumps({i: {"keys": [public_jwk(directory, n) for n in names]} for i, names in ISSUERS.items()}))
    elif command == "tokens":
        print(json.dumps([token(directory, spec) for spec in json.load(sys.stdin)]))
    else:
        sys.exit("usage: pyjwt_mint.py DIR jwks|tokens")


if __name__ == "__main__":
    main()
