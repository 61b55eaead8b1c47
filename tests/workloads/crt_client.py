"""GETs objects with the AWS Common Runtime's HTTP client (awscrt: s2n-tls,
SigV4 signing in C), one connection each, over HTTPS with a local CA; prints
[[key, status, body bytes], ...] as JSON: the ground truth for the s2n probes.

    python crt_client.py PORT CA_PEM KEY...
"""
import json
import sys

from awscrt import auth, http, io

port, ca, keys = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
elg = io.EventLoopGroup(1)
boot = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
opts = io.TlsContextOptions()
opts.override_default_trust_store_from_path(None, ca)
tls_ctx = io.ClientTlsContext(opts)
sign = auth.AwsSigningConfig(
    algorithm=auth.AwsSigningAlgorithm.V4,
    signature_type=auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
    credentials_provider=auth.AwsCredentialsProvider.new_static("testing", "testing"),
    region="us-east-1", service="s3",
    signed_body_header_type=auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256,
    signed_body_value=auth.AwsSignedBodyValue.EMPTY_SHA256)
got = []
for k in keys:
    tls = tls_ctx.new_connection_options()
    tls.set_server_name("localhost")
    conn = http.HttpClientConnection.new(host_name="localhost", port=port, bootstrap=boot,
                                         tls_connection_options=tls).result(30)
    body, status = bytearray(), []
    req = http.HttpRequest("GET", f"/data/{k}", http.HttpHeaders([("host", f"localhost:{port}")]))
    auth.aws_sign_request(req, sign).result(30)
    stream = conn.request(req, on_response=lambda status_code, **_: status.append(status_code),
                          on_body=lambda chunk, **_: body.extend(chunk))
    stream.activate()
    stream.completion_future.result(30)
    got.append([k, status[0], len(body)])
    conn.close().result(30)
print(json.dumps(got))
