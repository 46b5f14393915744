"""Compiler backends: each turns a GraphDef and a signature into a compiled GraphDef."""

from .base import Compiler
from .grappler import GrapplerCompiler

__all__ = ["Compiler", "GrapplerCompiler"]
