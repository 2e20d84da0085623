#!/usr/bin/env python3
"""The identity providers of docs/identity.md's walkthroughs, played on this machine for the test
(scripts/walkthroughs.sh): a Keycloak realm, https://sso.acme.example/realms/acme, and an Auth0
tenant, https://erp-prod.eu.auth0.com/. It answers the requests the walkthrough's `sh` blocks make
(the realm's JWKS and its token endpoint, Auth0's JWKS) over HTTPS on 127.0.0.1, with documents
shaped as those providers publish them and tokens signed by PyJWT, as tests/oidc/pyjwt_mint.py
signs them. Every key is made at start: the signing keys, a throwaway CA and the server's
certificate for both names. It runs under the PyJWT environment scripts/setup.sh prepares.

  provider.py DIR       serve until killed; once it listens, DIR (made 0700) holds
    .curlrc             what points curl at it (CURL_HOME=DIR): the CA, and every host:port
                        connected to 127.0.0.1:PORT, so no request leaves the machine
    answers             what the walkthrough's `read`s are given, one a line: maria's password (the
                        realm's token endpoint checks it), then the access token of globex's
                        supervisor as Auth0 issues it after she signs in through her organisation
    expected.json       the actors (`sub`) of both, for the test's checks
    ready               written last

The realm's document holds its RS256 signing key and its RSA-OAEP encryption key; Auth0's holds
one key on the first request and, from the second on, a new one beside it (a rotation).
"""
import base64
import datetime
import hashlib
import json
import os
import secrets
import ssl
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from jwt.algorithms import RSAAlgorithm

KEYCLOAK_HOST = "sso.acme.example"
KEYCLOAK_ISS = "https://sso.acme.example/realms/acme"
KEYCLOAK_CERTS = "/realms/acme/protocol/openid-connect/certs"
KEYCLOAK_TOKEN = "/realms/acme/protocol/openid-connect/token"
KEYCLOAK_CLIENT = "erp-agent"
AUTH0_HOST = "erp-prod.eu.auth0.com"
AUTH0_ISS = "https://erp-prod.eu.auth0.com/"
AUTH0_JWKS = "/.well-known/jwks.json"
AUTH0_API = "https://erp.example/api"
AUTH0_ROLES = "https://erp.example/roles"
AUTH0_ORG = "org_9fK2xQ"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def certificate(name, key, signer=None, issuer=None, days=3650, extensions=()):
    """A certificate for `key` named `name`, signed by `signer` (itself if none) as `issuer`."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signer or key, hashes.SHA256())


def jwk(key, kid, cert, **fields):
    """A public JWK as Keycloak and Auth0 publish one: the key, its kid, and its certificate."""
    der = cert.public_bytes(serialization.Encoding.DER)
    out = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    out.pop("key_ops", None)  # PyJWT's; neither provider publishes it
    out.update(kid=kid, x5c=[base64.b64encode(der).decode()], x5t=b64url(hashlib.sha1(der).digest()))
    out.update(fields)
    return out


class Provider:
    def __init__(self):
        # The realm: its RS256 signing key and its RSA-OAEP encryption key (Keycloak's defaults).
        self.kc_sig, self.kc_enc = rsa_key(), rsa_key()
        self.kc_sig_kid, self.kc_enc_kid = b64url(secrets.token_bytes(32)), b64url(secrets.token_bytes(32))
        # Auth0: the tenant's signing key, and the next one, published from the second request on.
        self.a0_key, self.a0_next = rsa_key(), rsa_key()
        self.a0_kid, self.a0_next_kid = b64url(secrets.token_bytes(16)), b64url(secrets.token_bytes(16))
        self.a0_requests = 0
        self.password = secrets.token_urlsafe(12)
        self.maria = str(uuid.uuid4())
        self.globex_supervisor = "auth0|" + secrets.token_hex(12)
        certs = {k: certificate(n, k) for k, n in [(self.kc_sig, "acme"), (self.kc_enc, "acme"),
                                                   (self.a0_key, AUTH0_HOST), (self.a0_next, AUTH0_HOST)]}
        self.kc_jwks = {"keys": [
            jwk(self.kc_enc, self.kc_enc_kid, certs[self.kc_enc], alg="RSA-OAEP", use="enc"),
            jwk(self.kc_sig, self.kc_sig_kid, certs[self.kc_sig], alg="RS256", use="sig"),
        ]}
        for key in self.kc_jwks["keys"]:
            der = base64.b64decode(key["x5c"][0])
            key["x5t#S256"] = b64url(hashlib.sha256(der).digest())
        self.a0_current = jwk(self.a0_key, self.a0_kid, certs[self.a0_key], alg="RS256", use="sig")
        self.a0_rotated = jwk(self.a0_next, self.a0_next_kid, certs[self.a0_next], alg="RS256", use="sig")

    def auth0_jwks(self):
        self.a0_requests += 1
        return {"keys": [self.a0_current] if self.a0_requests == 1 else [self.a0_rotated, self.a0_current]}

    def keycloak_token(self, form):
        """The realm's token endpoint, password grant: maria, a supervisor of tenant acme."""
        one = {k: v[0] for k, v in form.items() if len(v) == 1}
        if one.get("client_id") != KEYCLOAK_CLIENT:
            return 401, {"error": "invalid_client", "error_description": "Invalid client or Invalid client credentials"}
        if one.get("grant_type") != "password":
            return 400, {"error": "unsupported_grant_type", "error_description": "Unsupported grant_type"}
        if one.get("username") != "maria" or not secrets.compare_digest(one.get("password", ""), self.password):
            return 401, {"error": "invalid_grant", "error_description": "Invalid user credentials"}
        now = int(time.time())
        session = str(uuid.uuid4())
        claims = {
            "exp": now + 300, "iat": now, "jti": str(uuid.uuid4()), "iss": KEYCLOAK_ISS,
            "aud": ["toolgate", "account"], "sub": self.maria, "typ": "Bearer", "azp": KEYCLOAK_CLIENT,
            "sid": session, "acr": "1", "scope": "profile email",
            "realm_access": {"roles": ["default-roles-acme", "offline_access", "uma_authorization", "supervisor"]},
            "roles": ["default-roles-acme", "offline_access", "uma_authorization", "supervisor"],
            "tenant": "acme", "email_verified": True, "preferred_username": "maria",
        }
        token = jwt.encode(claims, self.kc_sig, algorithm="RS256", headers={"kid": self.kc_sig_kid})
        return 200, {"access_token": token, "expires_in": 300, "refresh_expires_in": 1800,
                     "token_type": "Bearer", "not-before-policy": 0, "session_state": session,
                     "scope": "profile email"}

    def auth0_token(self):
        """A supervisor of organisation globex, as the application receives her access token."""
        now = int(time.time())
        claims = {
            "iss": AUTH0_ISS, "sub": self.globex_supervisor, "aud": [AUTH0_API, AUTH0_ISS + "userinfo"],
            "iat": now, "exp": now + 7200, "scope": "openid profile email", "azp": secrets.token_urlsafe(24),
            "org_id": AUTH0_ORG, AUTH0_ROLES: ["supervisor", "viewer"],
        }
        return jwt.encode(claims, self.a0_key, algorithm="RS256", headers={"kid": self.a0_kid})


def handler(provider):
    class Handler(BaseHTTPRequestHandler):
        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def host(self):
            return (self.headers.get("Host") or "").split(":")[0]

        def do_GET(self):
            if (self.host(), self.path) == (KEYCLOAK_HOST, KEYCLOAK_CERTS):
                return self.reply(200, provider.kc_jwks)
            if (self.host(), self.path) == (AUTH0_HOST, AUTH0_JWKS):
                return self.reply(200, provider.auth0_jwks())
            self.reply(404, {"error": "not_found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode()
            if (self.host(), self.path) == (KEYCLOAK_HOST, KEYCLOAK_TOKEN):
                return self.reply(*provider.keycloak_token(parse_qs(body, keep_blank_values=True)))
            self.reply(404, {"error": "not_found"})

        def log_message(self, fmt, *args):
            sys.stderr.write("provider: %s %s\n" % (self.host(), fmt % args))

    return Handler


def write(path, text, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def serve(directory):
    os.makedirs(directory, mode=0o700, exist_ok=True)
    provider = Provider()
    # The server's certificate for both names, from a CA made now and trusted only by this curlrc.
    ca_key, server_key = rsa_key(), rsa_key()
    ca = certificate("walkthrough CA", ca_key, days=1,
                     extensions=[(x509.BasicConstraints(ca=True, path_length=0), True)])
    names = x509.SubjectAlternativeName([x509.DNSName(KEYCLOAK_HOST), x509.DNSName(AUTH0_HOST)])
    server = certificate(KEYCLOAK_HOST, server_key, signer=ca_key, issuer=ca.subject, days=1,
                         extensions=[(names, False)])
    pem = serialization.Encoding.PEM
    write(os.path.join(directory, "ca.pem"), ca.public_bytes(pem).decode())
    write(os.path.join(directory, "server.pem"), server.public_bytes(pem).decode())
    write(os.path.join(directory, "server.key"), server_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(os.path.join(directory, "server.pem"), os.path.join(directory, "server.key"))

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler(provider))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    port = httpd.server_address[1]
    write(os.path.join(directory, ".curlrc"),
          f'cacert = "{os.path.join(directory, "ca.pem")}"\nconnect-to = "::127.0.0.1:{port}"\nnoproxy = "*"\n')
    write(os.path.join(directory, "answers"), f"{provider.password}\n{provider.auth0_token()}\n")
    write(os.path.join(directory, "expected.json"),
          json.dumps({"acme": provider.maria, "globex": provider.globex_supervisor}))
    write(os.path.join(directory, "ready"), f"{port}\n")
    httpd.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: provider.py DIR")
    serve(sys.argv[1])
