"""The API's JSON responses: a wire model as its body, or an error in the API's one error shape
(`{"error": {"code", "message"}}`)."""

from __future__ import annotations

from pydantic import BaseModel
from starlette.responses import JSONResponse, Response

__all__ = ["error_response", "json_response"]


def json_response(model: BaseModel, status: int = 200) -> Response:
    """`model` as the JSON body of a `status` response."""
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def error_response(status: int, code: str, message: str) -> JSONResponse:
    """An error answer outside the `ApiError` tree (the guard's refusals, an unavailable database, a bug)."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
