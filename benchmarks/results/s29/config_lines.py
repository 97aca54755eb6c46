import ast, subprocess, sys
F="coevolve/base/config.py coevolve/base/sections.py coevolve/es/config.py coevolve/search/runconfig.py coevolve/agents/runconfig.py".split()
def defs(rev):
    out={}
    for f in F:
        src=subprocess.run(["git","show",f"{rev}:{f}"],capture_output=True,text=True).stdout
        lines=src.splitlines(); tree=ast.parse(src)
        nodes=[n for n in tree.body if isinstance(n,(ast.ClassDef,ast.FunctionDef))]
        for n in nodes:
            start=min([d.lineno for d in getattr(n,'decorator_list',[])]+[n.lineno])
            # include comment lines directly above
            s=start-1
            while s-1>=0 and lines[s-1].strip().startswith("#"): s-=1
            out[(f.split('/')[-2]+'/'+f.split('/')[-1],n.name)]=n.end_lineno-s+1
        out[(f,'<total>')]=len(lines)
    return out
a=defs(sys.argv[1]); b=defs(sys.argv[2])
keys=sorted(set(a)|set(b))
ta=tb=0
for k in keys:
    if k[1]=='<total>': continue
    print(f"{k[0]:24s} {k[1]:28s} {a.get(k,'-'):>5} {b.get(k,'-'):>5}")
print("defs total", sum(v for k,v in a.items() if k[1]!='<total>'), sum(v for k,v in b.items() if k[1]!='<total>'))
print("file total", sum(v for k,v in a.items() if k[1]=='<total>'), sum(v for k,v in b.items() if k[1]=='<total>'))
