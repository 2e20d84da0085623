#!/usr/bin/env python3
"""An OpenID provider for `toolgate login`'s and the approvals console's tests (tests/login.rs,
tests/console.rs), and the people who sign in.

The provider speaks the parts of OpenID Connect and OAuth 2.0 a command-line client uses, and is
as strict as a real one about each: discovery, a JWKS document, the authorization code grant with
PKCE (S256 only; the redirect URI a loopback address on any port, RFC 8252; the code used once and
only with its verifier and redirect URI), the device authorization grant (RFC 8628:
authorization_pending, slow_down, access_denied, expired_token, the code used once), and refresh
tokens rotated at every use, a used one ending its whole family. Tokens are RS256 JWTs signed by
PyJWT: an ID token for the client (with the nonce it was asked for) and an access token for the
API audience, both carrying the tenant and the roles. It serves HTTPS on 127.0.0.1 with a
certificate from a CA made at start. It runs under the PyJWT environment scripts/setup.sh prepares.

  login_provider.py serve DIR   serve until killed; once it listens, DIR (made 0700) holds
      ca.pem          the CA that signed the server's certificate (toolgate login --ca-file)
      jwks.json       the provider's JWKS document, for toolgate.add_issuer
      spki            the base64 SHA-256 of the server key's SubjectPublicKeyInfo (a browser's pin)
      person.json     who signs in: username, password, sub (the first of people.json)
      people.json     everyone who may sign in, by username: password, sub, tenant, roles
      browser         a command taking an address: the person, in a browser (BROWSER=DIR/browser)
      deny-browser    the same person, who denies
      forging-browser the same person, after another page sent the client a forged redirect
                      (what the client answered it: DIR/forged)
      issuer          written last: the issuer's URL
  login_provider.py person DIR URL [deny|forge]
      the person at URL (an authorization request, or the device page with its user_code):
      signs in with person.json's password and approves (or denies), as a browser would,
      following the redirect to the client's loopback address

Settings (environment): LOGIN_PROVIDER_TTL, the tokens' lifetime in seconds (300);
LOGIN_PROVIDER_PEOPLE, a JSON list of {"username", "tenant", "roles"} (default: maria, a supervisor
of shopping-a); DIR/deny-refresh, when it exists, makes the token endpoint refuse every refresh (a
session the provider ended). Two clients are registered, both public (PKCE): toolgate-cli and
toolgate-console; an ID token's audience is the client that asked for it.
"""
import base64
import datetime
import hashlib
import html
import ipaddress
import json
import os
import re
import secrets
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from jwt.algorithms import RSAAlgorithm

CLIENTS = ("toolgate-cli", "toolgate-console")
API = "toolgate"
TENANT = "shopping-a"  # seed 000's first tenant
PEOPLE = [{"username": "maria", "tenant": TENANT, "roles": ["supervisor", "offline_access"]}]


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def certificate(name, key, signer=None, issuer=None, extensions=()):
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer or subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1)))
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signer or key, hashes.SHA256())


def loopback_redirect(uri):
    """RFC 8252 7.3: http, a loopback IP literal, any port."""
    try:
        parts = urllib.parse.urlsplit(uri)
        return parts.scheme == "http" and ipaddress.ip_address(parts.hostname).is_loopback and not parts.fragment
    except (ValueError, TypeError):
        return False


class Provider:
    def __init__(self, directory, issuer):
        self.directory, self.issuer = directory, issuer
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = b64url(secrets.token_bytes(16))
        public = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        public.pop("key_ops", None)
        public.update(kid=self.kid, alg="RS256", use="sig")
        self.jwks = {"keys": [public]}
        listed = json.loads(os.environ.get("LOGIN_PROVIDER_PEOPLE") or "null") or PEOPLE
        self.people = {p["username"]: dict(p, password=secrets.token_urlsafe(12), sub=str(uuid.uuid4()))
                       for p in listed}
        self.first = listed[0]["username"]
        self.ttl = int(os.environ.get("LOGIN_PROVIDER_TTL", "300"))
        self.lock = threading.Lock()
        self.requests = {}   # authorization request id -> its parameters
        self.codes = {}      # code -> (request parameters, issued at)
        self.devices = {}    # device_code -> {user_code, state, scope, audience, expires, last_poll}
        self.refresh = {}    # refresh token -> {family, scope, audience, used}
        self.ended = set()   # refresh families ended by a reuse

    def discovery(self):
        i = self.issuer
        return {
            "issuer": i, "authorization_endpoint": i + "/authorize", "token_endpoint": i + "/token",
            "device_authorization_endpoint": i + "/device", "jwks_uri": i + "/jwks",
            "response_types_supported": ["code"], "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"], "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code", "refresh_token",
                                      "urn:ietf:params:oauth:grant-type:device_code"],
            "scopes_supported": ["openid", "profile", "offline_access"],
            "token_endpoint_auth_methods_supported": ["none"],
        }

    def tokens(self, scope, audience, nonce=None, family=None, client=CLIENTS[0], username=None):
        now = int(time.time())
        who = self.people[username or self.first]
        common = {"iss": self.issuer, "sub": who["sub"], "iat": now, "exp": now + self.ttl, "azp": client,
                  "tenant": who["tenant"], "roles": who["roles"]}
        access = dict(common, aud=[audience or API], scope=scope, jti=str(uuid.uuid4()))
        ident = dict(common, aud=client, auth_time=now, preferred_username=who["username"])
        if nonce is not None:
            ident["nonce"] = nonce
        sign = lambda claims: jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})
        refresh = secrets.token_urlsafe(32)
        self.refresh[refresh] = {"family": family or str(uuid.uuid4()), "scope": scope, "audience": audience,
                                 "used": False, "client": client, "username": who["username"]}
        return 200, {"access_token": sign(access), "id_token": sign(ident), "token_type": "Bearer",
                     "expires_in": self.ttl, "refresh_token": refresh, "scope": scope}

    # The token endpoint, one grant at a time.
    def token(self, form, basic_client):
        if form.get("client_id", basic_client) not in CLIENTS:
            return 401, {"error": "invalid_client"}
        grant = form.get("grant_type")
        with self.lock:
            if grant == "authorization_code":
                return self.code_grant(form)
            if grant == "urn:ietf:params:oauth:grant-type:device_code":
                return self.device_grant(form)
            if grant == "refresh_token":
                return self.refresh_grant(form)
        return 400, {"error": "unsupported_grant_type"}

    def code_grant(self, form):
        issued = self.codes.pop(form.get("code", ""), None)
        if issued is None:
            return 400, {"error": "invalid_grant", "error_description": "unknown or used code"}
        request, at = issued
        if form.get("client_id") != request["client_id"]:
            return 400, {"error": "invalid_grant", "error_description": "the code is another client's"}
        if time.time() - at > 60 or form.get("redirect_uri") != request["redirect_uri"]:
            return 400, {"error": "invalid_grant", "error_description": "code expired or redirect_uri differs"}
        verifier = form.get("code_verifier", "")
        if not re.fullmatch(r"[A-Za-z0-9._~-]{43,128}", verifier) or \
                b64url(hashlib.sha256(verifier.encode()).digest()) != request["code_challenge"]:
            return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
        return self.tokens(request["scope"], request.get("audience"), request.get("nonce"), client=request["client_id"],
                           username=request["username"])

    def device_grant(self, form):
        device = self.devices.get(form.get("device_code", ""))
        if device is None:
            return 400, {"error": "invalid_grant"}
        now = time.time()
        if now > device["expires"]:
            return 400, {"error": "expired_token"}
        too_soon = now - device["last_poll"] < 1.0
        device["last_poll"] = now
        if device["state"] == "denied":
            return 400, {"error": "access_denied"}
        if device["state"] == "pending":
            return 400, {"error": "slow_down" if too_soon else "authorization_pending"}
        del self.devices[form["device_code"]]
        return self.tokens(device["scope"], device.get("audience"), username=device["username"])

    def refresh_grant(self, form):
        held = self.refresh.get(form.get("refresh_token", ""))
        if held is None or held["family"] in self.ended or os.path.exists(os.path.join(self.directory, "deny-refresh")):
            return 400, {"error": "invalid_grant", "error_description": "refresh token not valid"}
        if held["used"]:
            self.ended.add(held["family"])
            return 400, {"error": "invalid_grant", "error_description": "refresh token reused; session ended"}
        held["used"] = True
        return self.tokens(held["scope"], held["audience"], family=held["family"], client=held["client"],
                           username=held["username"])

    def device_authorization(self, form):
        if form.get("client_id") != CLIENTS[0]:
            return 401, {"error": "invalid_client"}
        code = secrets.token_urlsafe(32)
        user_code = "-".join(secrets.token_hex(2).upper() for _ in range(2))
        with self.lock:
            self.devices[code] = {"user_code": user_code, "state": "pending", "scope": form.get("scope", ""),
                                  "audience": form.get("audience"), "expires": time.time() + 600, "last_poll": 0}
        return 200, {"device_code": code, "user_code": user_code, "verification_uri": self.issuer + "/activate",
                     "verification_uri_complete": self.issuer + "/activate?user_code=" + user_code,
                     "expires_in": 600, "interval": 1}

    def authorize(self, query):
        """The authorization request, checked before the person sees anything."""
        q = {k: v[0] for k, v in query.items() if len(v) == 1}
        if q.get("client_id") not in CLIENTS or not loopback_redirect(q.get("redirect_uri", "")):
            return None, "unknown client or redirect_uri not a loopback address"
        problems = []
        if q.get("response_type") != "code":
            problems.append("response_type")
        if "openid" not in q.get("scope", "").split():
            problems.append("scope")
        if q.get("code_challenge_method") != "S256" or len(q.get("code_challenge", "")) != 43:
            problems.append("pkce")
        if not q.get("state"):
            problems.append("state")
        if problems:
            return None, "invalid request: " + ", ".join(problems)
        rid = secrets.token_urlsafe(16)
        with self.lock:
            self.requests[rid] = q
        return rid, None

    def sign_in(self, form):
        """The person's answer on the sign-in page: back to the client with a code, or access_denied."""
        with self.lock:
            request = self.requests.pop(form.get("request", ""), None)
        if request is None:
            return None
        target = {"state": request["state"]}
        who = self.people.get(form.get("username", ""))
        if form.get("answer") == "approve" and who is not None and \
                secrets.compare_digest(form.get("password", ""), who["password"]):
            code = secrets.token_urlsafe(24)
            with self.lock:
                self.codes[code] = (dict(request, username=who["username"]), time.time())
            target["code"] = code
        else:
            target["error"] = "access_denied"
        return request["redirect_uri"] + "?" + urllib.parse.urlencode(target)

    def activate(self, form):
        who = self.people.get(form.get("username", ""))
        ok = who is not None and secrets.compare_digest(form.get("password", ""), who["password"])
        with self.lock:
            for device in self.devices.values():
                if device["user_code"] == form.get("user_code") and device["state"] == "pending":
                    device["state"] = "approved" if ok and form.get("answer") == "approve" else "denied"
                    device["username"] = who["username"] if ok else None
                    return True
        return False


def handler(provider):
    class Handler(BaseHTTPRequestHandler):
        def send(self, status, body, ctype="application/json", headers=()):
            data = (json.dumps(body) if ctype == "application/json" else body).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def form(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            pairs = urllib.parse.parse_qs(body, keep_blank_values=True)
            if any(len(v) != 1 for v in pairs.values()):
                return None
            return {k: v[0] for k, v in pairs.items()}

        def basic_client(self):
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                user = base64.b64decode(auth[6:]).decode().split(":", 1)[0]
                return urllib.parse.unquote_plus(user)
            return None

        def do_GET(self):
            path, _, query = self.path.partition("?")
            query = urllib.parse.parse_qs(query)
            if path == "/.well-known/openid-configuration":
                return self.send(200, provider.discovery())
            if path == "/jwks":
                return self.send(200, provider.jwks)
            if path == "/authorize":
                rid, problem = provider.authorize(query)
                if problem:
                    return self.send(400, f"<p>{html.escape(problem)}</p>", "text/html")
                return self.send(200, PAGE.format(action="/oidc/authorize", hidden=f'name="request" value="{rid}"'),
                                 "text/html")
            if path == "/activate":
                code = html.escape(query.get("user_code", [""])[0], quote=True)
                return self.send(200, PAGE.format(action="/oidc/activate", hidden=f'name="user_code" value="{code}"'),
                                 "text/html")
            self.send(404, {"error": "not_found"})

        def do_POST(self):
            path = self.path.partition("?")[0]
            form = self.form()
            if form is None:
                return self.send(400, {"error": "invalid_request", "error_description": "a parameter twice"})
            if path == "/token":
                return self.send(*provider.token(form, self.basic_client()))
            if path == "/device":
                return self.send(*provider.device_authorization(form))
            if path == "/authorize":
                target = provider.sign_in(form)
                if target is None:
                    return self.send(400, "<p>unknown request</p>", "text/html")
                return self.send(302, "", "text/html", [("Location", target)])
            if path == "/activate":
                done = provider.activate(form)
                return self.send(200 if done else 400, "<p>done</p>" if done else "<p>unknown code</p>", "text/html")
            self.send(404, {"error": "not_found"})

        def log_message(self, fmt, *args):
            sys.stderr.write("login provider: %s\n" % (fmt % args))

    return Handler


PAGE = """<!doctype html><title>Sign in</title>
<form method="post" action="{action}"><input type="hidden" {hidden}>
<input name="username"><input name="password" type="password">
<button name="answer" value="approve">Allow</button><button name="answer" value="deny">Deny</button></form>"""


def write(path, text, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def serve(directory):
    os.makedirs(directory, mode=0o700, exist_ok=True)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = certificate("login test CA", ca_key, extensions=[(x509.BasicConstraints(ca=True, path_length=0), True)])
    names = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    server = certificate("127.0.0.1", server_key, signer=ca_key, issuer=ca.subject, extensions=[(names, False)])
    pem = serialization.Encoding.PEM
    write(os.path.join(directory, "ca.pem"), ca.public_bytes(pem).decode())
    write(os.path.join(directory, "server.pem"), server.public_bytes(pem).decode())
    write(os.path.join(directory, "server.key"), server_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(os.path.join(directory, "server.pem"), os.path.join(directory, "server.key"))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), None)
    provider = Provider(directory, f"https://127.0.0.1:{httpd.server_address[1]}/oidc")
    httpd.RequestHandlerClass = prefixed(handler(provider))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    write(os.path.join(directory, "jwks.json"), json.dumps(provider.jwks))
    # The server key's SPKI pin, for a browser told to trust exactly this key
    # (--ignore-certificate-errors-spki-list): tests/console/browser.py.
    spki = server_key.public_key().public_bytes(serialization.Encoding.DER,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
    write(os.path.join(directory, "spki"), base64.b64encode(hashlib.sha256(spki).digest()).decode())
    first = provider.people[provider.first]
    write(os.path.join(directory, "person.json"),
          json.dumps({"username": first["username"], "password": first["password"], "sub": first["sub"]}))
    write(os.path.join(directory, "people.json"), json.dumps(provider.people))
    write(os.path.join(directory, "browser"),
          f"#!/bin/sh\nexec '{sys.executable}' '{os.path.abspath(__file__)}' person '{directory}' \"$1\"\n", 0o700)
    write(os.path.join(directory, "forging-browser"),
          f"#!/bin/sh\nexec '{sys.executable}' '{os.path.abspath(__file__)}' person '{directory}' \"$1\" forge\n", 0o700)
    write(os.path.join(directory, "deny-browser"),
          f"#!/bin/sh\nexec '{sys.executable}' '{os.path.abspath(__file__)}' person '{directory}' \"$1\" deny\n", 0o700)
    write(os.path.join(directory, "issuer"), provider.issuer + "\n")
    httpd.serve_forever()


def prefixed(cls):
    """The provider lives under /oidc, as a realm does under its path."""
    class Prefixed(cls):
        def parse_request(self):
            if not super().parse_request():
                return False
            if not self.path.startswith("/oidc/") and not self.path.startswith("/oidc?"):
                self.path = "/not-here"
            else:
                self.path = self.path[len("/oidc"):]
            return True
    return Prefixed


def person(directory, url, answer="approve"):
    """A browser: the page at URL, its form filled in and sent, the redirect followed. With
    answer "forge", another page reaches the client's loopback first with a code and a state of
    its own (a cross-site request), and what the client answered goes to DIR/forged; then the
    person approves."""
    context = ssl.create_default_context(cafile=os.path.join(directory, "ca.pem"))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    if answer == "forge":
        redirect = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["redirect_uri"][0]
        try:
            status = opener.open(redirect + "?code=forged-code&state=forged-state").status
        except urllib.error.HTTPError as e:
            status = e.code
        write(os.path.join(directory, "forged"), f"{status}\n")
        answer = "approve"
    who = json.load(open(os.path.join(directory, "person.json")))
    page = opener.open(url).read().decode()
    action = re.search(r'action="([^"]+)"', page).group(1)
    name, value = re.search(r'type="hidden" name="([^"]+)" value="([^"]*)"', page).groups()
    parts = urllib.parse.urlsplit(url)
    target = f"{parts.scheme}://{parts.netloc}{action}"
    form = urllib.parse.urlencode({name: html.unescape(value), "username": who["username"],
                                   "password": who["password"], "answer": answer}).encode()
    reply = opener.open(target, data=form)  # a 302 to the loopback is followed, as a browser would
    sys.stdout.write(reply.read().decode(errors="replace"))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "person":
        person(sys.argv[2], sys.argv[3], *sys.argv[4:])
    else:
        sys.exit(__doc__)
