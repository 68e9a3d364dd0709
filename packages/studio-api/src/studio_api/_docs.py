"""``/docs`` served from this machine: no request leaves it.

FastAPI's own page loads Swagger UI from a CDN (and a favicon from another host), which a
machine without internet, and many production networks, cannot reach. The assets come from
the ``fastapi-offline`` distribution instead, mounted under :data:`ASSETS_PATH`.

ReDoc (FastAPI's ``/redoc``) is not served: its bundle always fetches a logo from
cdn.redoc.ly, with no option to leave it out.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

DOCS_PATH = "/docs"
#: Where the Swagger UI bundle, its stylesheet and the favicon are served.
ASSETS_PATH = "/docs/assets"
#: Swagger UI's defaults that would reach another host: its validator badge sends the
#: document to validator.swagger.io.
SWAGGER_PARAMETERS = {"validatorUrl": None}


def assets_directory() -> Path:
    """The folder of ``fastapi-offline`` holding ``swagger-ui-bundle.js`` and the rest."""
    return Path(str(files("fastapi_offline") / "static"))


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (Swagger UI) and its assets from this process.

    ``app`` must be built with ``docs_url=None, redoc_url=None`` so FastAPI's CDN pages are off.
    """
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"
    app.mount(ASSETS_PATH, StaticFiles(directory=assets_directory()), name="docs-assets")

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - API docs",
            oauth2_redirect_url=f"{root}{redirect_url}",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
            swagger_ui_parameters={**SWAGGER_PARAMETERS, **(app.swagger_ui_parameters or {})},
        )

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
