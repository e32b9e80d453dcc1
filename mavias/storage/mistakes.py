"""The user's mistake behind an object-store error: no or refused credentials, no such bucket, no endpoint there."""

from __future__ import annotations

from botocore.exceptions import ClientError, HTTPClientError, NoCredentialsError
from botocore.exceptions import ConnectionError as BotoConnectionError

from mavias.errors import UserError
from mavias.storage.s3 import ENV_PREFIX

CREDENTIAL_CODES = frozenset({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                              "InvalidToken", "403"})


def storage_user_error(error: BaseException) -> UserError | None:
    """The user mistake behind an object-store error (no or refused credentials, no such bucket, no endpoint
    there), or None."""
    if isinstance(error, NoCredentialsError):
        return UserError("no credentials for the object store",
                         hint=f"set {ENV_PREFIX}ACCESS_KEY_ID and {ENV_PREFIX}SECRET_ACCESS_KEY, or the standard AWS "
                              "variables or profile")
    if isinstance(error, BotoConnectionError | HTTPClientError):  # refused, unresolvable, silent (a timeout), cut off
        where = error.kwargs.get("endpoint_url") or "its endpoint"
        return UserError(f"cannot reach the object store at {where} ({type(error).__name__})",
                         hint=f"check s3.endpoint_url ({ENV_PREFIX}ENDPOINT_URL) and that the store is running")
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code in CREDENTIAL_CODES:
            return UserError(f"the object store refused the credentials ({code})",
                             hint="check the access key, the secret and the key's permissions on the bucket")
        if code == "NoSuchBucket":
            return UserError("the bucket does not exist", hint=f"create it, or fix s3.bucket ({ENV_PREFIX}BUCKET)")
    return None
