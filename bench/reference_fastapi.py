"""A reference, not part of the service: GET by id as a FastAPI tutorial writes it, for `bench/run.py` to compare with.

A plain `def` handler (FastAPI runs it in its thread pool), a SQLAlchemy session per request from a dependency,
`session.get` by primary key, a Pydantic response model; no auth, no logging, no metrics. It reads the same
`pets` table of the same SQLite database through the same driver (pysqlite3), and is served by the same Granian
setup as the service and the ceilings (ASGI, uvloop, the same workers, no access log). The service never
imports it, and it imports nothing of the service.

Usage: .venv/bin/python bench/reference_fastapi.py --database-url sqlite:///PATH --port 8002 [--workers 2]
"""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at run time, and the session
# dependency is local to create_app.
import argparse
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pysqlite3.dbapi2 as sqlite3
from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict
from sqlalchemy import BigInteger, Integer, Text, Uuid, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


class Base(DeclarativeBase):
    pass


class PetRow(Base):
    __tablename__ = "pets"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    created_at: Mapped[int] = mapped_column(BigInteger)
    created_by: Mapped[str] = mapped_column(Text)
    modified_at: Mapped[int] = mapped_column(BigInteger)
    modified_by: Mapped[str] = mapped_column(Text)
    owner_id: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    pet_type: Mapped[str] = mapped_column(Text)
    revision: Mapped[int] = mapped_column(Integer)


class Pet(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    created_at: int
    created_by: str
    modified_at: int
    modified_by: str
    owner_id: str
    name: str
    pet_type: str
    revision: int


def create_app() -> FastAPI:
    engine = create_engine(
        os.environ["REFERENCE_DATABASE_URL"], module=sqlite3, connect_args={"check_same_thread": False}
    )

    def get_session() -> Iterator[Session]:
        with Session(engine) as session:
            yield session

    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/pets/{pet_id}", response_model=Pet)
    def read_pet(pet_id: uuid.UUID, session: Annotated[Session, Depends(get_session)]) -> PetRow:
        pet = session.get(PetRow, pet_id)
        if pet is None:
            raise HTTPException(status_code=404, detail="Pet not found")
        return pet

    return app


def main() -> None:
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.server import Server

    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True, help="sqlite:///PATH, the database the service serves")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="Granian's runtime threads, as `petrecords serve`")
    args = parser.parse_args()
    if not args.database_url.startswith("sqlite:///"):
        raise SystemExit("the FastAPI reference reads SQLite only")
    os.environ["REFERENCE_DATABASE_URL"] = args.database_url
    Server(
        "reference_fastapi:create_app",
        address="127.0.0.1",
        port=args.port,
        interface=Interfaces.ASGI,
        workers=args.workers,
        runtime_threads=args.threads,
        loop=Loops.uvloop,
        http=HTTPModes.http1,
        factory=True,
        log_access=False,
        working_dir=Path(__file__).resolve().parent,
    ).serve()


if __name__ == "__main__":
    main()
