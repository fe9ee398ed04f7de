"""Writes the Python-side corpus files: Pydantic v2 output for the OpenAI and Anthropic
Python SDK examples (through the SDKs' own strict transforms, loaded from their sources),
typical Pydantic models, and the tool lists of the Python-only MCP servers git and fetch."""
import json, sys, os, datetime, uuid, importlib.util, types
from enum import Enum, IntEnum
from typing import List, Union, Optional, Literal, Annotated, Dict, Tuple, Set
import pydantic
from pydantic import BaseModel, Field, ConfigDict, TypeAdapter, AnyUrl, HttpUrl, conint, constr

sys.path.insert(0, "/tmp/corpus-work/pystub")
from openai.lib._pydantic import to_strict_json_schema  # the SDK's own file, stubbed imports

# anthropic/lib/_parse/_transform.py needs only is_list from anthropic._utils.
pkg = types.ModuleType("anthropic"); pkg.__path__ = []
utils = types.ModuleType("anthropic._utils"); utils.is_list = lambda o: isinstance(o, list)
sys.modules.update({"anthropic": pkg, "anthropic._utils": utils})
for name in ["anthropic.lib", "anthropic.lib._parse"]:
    m = types.ModuleType(name); m.__path__ = []; sys.modules[name] = m
spec = importlib.util.spec_from_file_location("anthropic.lib._parse._transform", "/tmp/corpus-work/anthropic_transform.py")
tr = importlib.util.module_from_spec(spec); sys.modules[spec.name] = tr; spec.loader.exec_module(tr)
transform_schema = tr.transform_schema

PV = pydantic.VERSION
OPY = ("openai/openai-python", "e43b422412a9e96c9cc5192c61fffbe2d7e04836")
APY = ("anthropics/anthropic-sdk-python", "009b035305e0724ce108ebd796935f91711fc6e1")
SRV = ("modelcontextprotocol/servers", "76d64c822f5125032f89eb71dbdb94e42b434821")

def src(repo, file, how, model=None):
    s = {"repository": "https://github.com/%s" % repo[0], "commit": repo[1], "file": file,
         "generated_by": "pydantic %s" % PV, "how": how}
    if model: s["model"] = model
    return s

def write(name, source, schema=None, tools=None):
    doc = {"_source": source}
    if schema is not None: doc["schema"] = schema
    if tools is not None: doc["tools"] = tools
    with open("/tmp/corpus-work/corpus/%s.json" % name, "w") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False); f.write("\n")

# --- openai-python examples/parsing.py (MathResponse), through the SDK's to_strict_json_schema
class Step(BaseModel):
    explanation: str
    output: str
class MathResponse(BaseModel):
    steps: List[Step]
    final_answer: str
write("openai-python-math-response", src(OPY, "examples/parsing.py",
      "openai.lib._pydantic.to_strict_json_schema(MathResponse), the schema client.chat.completions.parse(response_format=MathResponse) sends; run from the SDK's source file at that commit with its three imports stubbed", "MathResponse"),
      schema=to_strict_json_schema(MathResponse))

# --- openai-python examples/parsing_tools.py (Query), openai.pydantic_function_tool(Query)
class Table(str, Enum):
    orders = "orders"; customers = "customers"; products = "products"
class Column(str, Enum):
    id = "id"; status = "status"; expected_delivery_date = "expected_delivery_date"; delivered_at = "delivered_at"
    shipped_at = "shipped_at"; ordered_at = "ordered_at"; canceled_at = "canceled_at"
class Operator(str, Enum):
    eq = "="; gt = ">"; lt = "<"; le = "<="; ge = ">="; ne = "!="
class OrderBy(str, Enum):
    asc = "asc"; desc = "desc"
class DynamicValue(BaseModel):
    column_name: str
class Condition(BaseModel):
    column: str
    operator: Operator
    value: Union[str, int, DynamicValue]
class Query(BaseModel):
    table_name: Table
    columns: List[Column]
    conditions: List[Condition]
    order_by: OrderBy
write("openai-python-query-tool", src(OPY, "examples/parsing_tools.py",
      "openai.pydantic_function_tool(Query): function.parameters = to_strict_json_schema(Query); also examples/responses/structured_outputs_tools.py", "Query"),
      tools=[{"name": "Query", "inputSchema": to_strict_json_schema(Query)}])

# --- anthropic-sdk-python examples/structured_outputs.py (Order), through the SDK's transform_schema
class Order(BaseModel):
    product_name: str
    price: float
    quantity: int
write("anthropic-python-order", src(APY, "examples/structured_outputs.py",
      "anthropic.transform_schema(Order), what client.messages.parse(output_format=Order) sends as output_format.schema; run from the SDK's source file at that commit with is_list stubbed", "Order"),
      schema=transform_schema(Order))
write("anthropic-python-tools", src(APY, "examples/tools.py", "the tools list literal of the example (input_schema)"),
      tools=[{"name": "get_weather", "inputSchema": {"type": "object", "properties": {"location": {"type": "string"}}}}])

# --- typical Pydantic models, raw model_json_schema() (what a Pydantic user sends as-is)
TYP = ("pydantic/pydantic", "docs")
def typ(file, how, model):
    return {"generated_by": "pydantic %s" % PV, "file": file, "how": how, "model": model,
            "note": "model written for this corpus in the usual Pydantic style; the schema is Pydantic's real output"}

# The Pydantic docs' JSON Schema page example (docs/concepts/json_schema.md, "Generating JSON Schema").
class FooBar(BaseModel):
    count: int
    size: Optional[float] = None
class Gender(str, Enum):
    male = "male"; female = "female"; other = "other"; not_given = "not_given"
class MainModel(BaseModel):
    """
    This is the description of the main model
    """
    model_config = ConfigDict(title="Main")
    foo_bar: FooBar
    gender: Annotated[Union[Gender, None], Field(alias="Gender")] = None
    snap: int = Field(default=42, title="The Snap", description="this is the value of snap", gt=30, lt=50)
write("pydantic-docs-main-model", {"generated_by": "pydantic %s" % PV, "url": "https://docs.pydantic.dev/latest/concepts/json_schema/",
      "file": "docs/concepts/json_schema.md", "how": "MainModel.model_json_schema(mode='validation') of the docs' first example, verbatim", "model": "MainModel"},
      schema=MainModel.model_json_schema())

class Address(BaseModel):
    street: str
    city: str
    postal_code: Annotated[str, Field(pattern=r"^[0-9]{5}(-[0-9]{4})?$")]
    country: str = "US"
class LineItem(BaseModel):
    sku: Annotated[str, Field(min_length=3, max_length=32)]
    description: Optional[str] = None
    quantity: Annotated[int, Field(ge=1, le=1000)]
    unit_price: Annotated[float, Field(ge=0)]
class Invoice(BaseModel):
    """An invoice with line items."""
    invoice_id: uuid.UUID
    issued: datetime.date
    due: Optional[datetime.date] = None
    customer: str
    billing_address: Address
    shipping_address: Optional[Address] = None
    items: Annotated[List[LineItem], Field(min_length=1)]
    status: Literal["draft", "sent", "paid", "void"] = "draft"
    notes: List[str] = []
write("pydantic-invoice", typ("-", "Invoice.model_json_schema()", "Invoice(Address, LineItem): uuid, date, pattern, ge/le, Literal, Optional nested model"),
      schema=Invoice.model_json_schema())

class Category(BaseModel):
    name: str
    subcategories: List["Category"] = []
    parent_id: Optional[int] = None
write("pydantic-recursive-category", typ("-", "Category.model_json_schema()", "Category listing itself (recursive $ref to #/$defs/Category)"),
      schema=Category.model_json_schema())

class Cat(BaseModel):
    pet_type: Literal["cat"]
    meows: int
class Dog(BaseModel):
    pet_type: Literal["dog"]
    barks: float
class Lizard(BaseModel):
    pet_type: Literal["reptile", "lizard"]
    scales: bool
class Owner(BaseModel):
    name: str
    pet: Union[Cat, Dog, Lizard] = Field(discriminator="pet_type")
write("pydantic-discriminated-union", typ("-", "Owner.model_json_schema()", "Owner with pet: Union[Cat, Dog, Lizard] = Field(discriminator='pet_type') (oneOf + discriminator), the Pydantic docs' unions example shape"),
      schema=Owner.model_json_schema())

class Role(str, Enum):
    admin = "admin"; editor = "editor"; viewer = "viewer"
class Priority(IntEnum):
    low = 1; medium = 2; high = 3
class UserAccount(BaseModel):
    id: uuid.UUID
    username: Annotated[str, Field(min_length=3, max_length=20, pattern=r"^[a-z0-9_]+$")]
    full_name: Optional[str] = None
    age: Optional[Annotated[int, Field(ge=13, le=130)]] = None
    role: Role = Role.viewer
    priority: Priority = Priority.medium
    website: Optional[HttpUrl] = None
    created_at: datetime.datetime
    tags: Annotated[List[str], Field(max_length=10)] = []
write("pydantic-user-account", typ("-", "UserAccount.model_json_schema()", "UserAccount: uuid, pattern + lengths, Optional bounded int, str Enum and IntEnum in $defs, HttpUrl, datetime"),
      schema=UserAccount.model_json_schema())

class Settings(BaseModel):
    limits: Dict[str, int]
    point: Tuple[float, float]
    labels: Set[str] = set()
    ratio: Annotated[float, Field(gt=0, lt=1)] = 0.5
    step: Annotated[int, Field(multiple_of=5)] = 10
    timeout: datetime.timedelta = datetime.timedelta(seconds=30)
    start_time: Optional[datetime.time] = None
write("pydantic-settings-containers", typ("-", "Settings.model_json_schema()", "Settings: dict[str,int], tuple (prefixItems), set (uniqueItems), exclusive float bounds, multiple_of, timedelta (duration), time"),
      schema=Settings.model_json_schema())

class Person(BaseModel):
    name: str
    email: Optional[str] = None
class Meeting(BaseModel):
    title: str
    attendees: List[Person]
    organizer: Person
    starts_at: datetime.datetime
    duration_minutes: Annotated[int, Field(gt=0, le=480)]
    location: Optional[str] = None
write("pydantic-typeadapter-list", typ("-", "TypeAdapter(list[Meeting]).json_schema()", "a top-level array of a model with $defs"),
      schema=TypeAdapter(List[Meeting]).json_schema())
write("openai-strict-pydantic-meeting", {"generated_by": "pydantic %s" % PV, "repository": "https://github.com/openai/openai-python", "commit": OPY[1],
      "file": "src/openai/lib/_pydantic.py", "how": "to_strict_json_schema(Meeting): what the OpenAI Python SDK sends for this model (additionalProperties false, every property required, nullable defaults)", "model": "Meeting(Person)"},
      schema=to_strict_json_schema(Meeting))
write("anthropic-transform-pydantic-invoice", {"generated_by": "pydantic %s" % PV, "repository": "https://github.com/anthropics/anthropic-sdk-python", "commit": APY[1],
      "file": "src/anthropic/lib/_parse/_transform.py", "how": "transform_schema(Invoice): what the Anthropic Python SDK sends for the Invoice model above (unsupported keywords moved into descriptions)", "model": "Invoice(Address, LineItem)"},
      schema=transform_schema(Invoice))

# --- MCP servers git and fetch: Python only (PyPI mcp-server-git / mcp-server-fetch, not on npm).
exec(open("/tmp/corpus-work/pyextract_lib.py").read())
for key, path in [("git", "src/git/src/mcp_server_git/server.py"), ("fetch", "src/fetch/src/mcp_server_fetch/server.py")]:
    write("mcp-server-" + key, {"repository": "https://github.com/modelcontextprotocol/servers", "commit": SRV[1], "file": path,
          "generated_by": "pydantic %s" % PV,
          "how": "Python-only server (PyPI mcp-server-%s; not on npm): its tools/list inputSchema is <Model>.model_json_schema() of the Pydantic models in this file, computed here from the file's model definitions (the server's other imports are not installable)" % key},
          tools=models("/tmp/corpus-work/src/servers/" + path))
print("ok")
