import ast, json, re, sys, pydantic
def models(path):
    src = open(path).read()
    tree = ast.parse(src)
    keep = []
    for n in tree.body:
        if isinstance(n, ast.ImportFrom) and n.module in ("pydantic", "typing", "enum", "typing_extensions"):
            keep.append(n)
        elif isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() for t in n.targets):
            keep.append(n)
        elif isinstance(n, ast.ClassDef):
            keep.append(n)
    ns = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), ns)
    # Tool(name=X.Y or "literal", description=..., inputSchema=Class.model_json_schema())
    tools = []
    for m in re.finditer(r'name=([\w."]+),.*?inputSchema=(\w+)\.model_json_schema\(\)', src, re.S):
        nm = m.group(1)
        if nm.startswith('"'):
            name = nm.strip('"')
        else:
            enum, member = nm.split(".")
            name = getattr(ns[enum], member).value
        tools.append({"name": name, "inputSchema": ns[m.group(2)].model_json_schema()})
    return tools
