// The policy test of k8s/ (run by tests/k8s/check.sh, which renders the
// overlays and installs this folder's npm packages into the build tree).
//
//   node check.mjs [--overlay NAME=RENDER[,RENDER...]]... [--add NAME=FILE]...
//                  [--source DIR] [--config-doc FILE] [--expect RULE,...]
//
// --overlay  the renders of one overlay, one per kubectl: the first is
//            checked, the others must hold the same objects.
// --add      extra documents appended to an overlay's render (the negative
//            self-test adds an allow-all NetworkPolicy this way).
// --source   a tree whose files are scanned for committed Secret values.
// --config-doc  docs/configuration.md: every KEELSON_* variable a manifest
//            sets must be named there (a misspelt one is silently ignored by
//            the binaries).
// --expect   negative mode: succeed only if the check fails and every rule
//            named fails at least once (so no rule can silently pass).
//
// Every object is validated against the Kubernetes API schemas of
// kubernetes-models (required fields, types, enums), then for fields those
// schemas let through (unknown keys, from the models' type declarations),
// then against keelson's own rules, one id each (RULES below). Exit status 1
// and one line per failure when anything fails.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const MODELS = path.join(HERE, "node_modules");

const RULES = {
  parse: "every render is YAML",
  "api-version": "only current, GA API versions of the kinds keelson uses",
  schema: "every object passes the Kubernetes API schema",
  "unknown-field": "no field the API does not know (a typo is dropped silently)",
  name: "names are valid DNS names (objects, containers, ports)",
  selector: "selectors match the pods they are meant for",
  refs: "every ConfigMap, Secret and ServiceAccount a pod names exists",
  probes: "every container has liveness and readiness probes",
  resources: "every container has CPU and memory requests and limits",
  security: "non-root, read-only root, no capability, seccomp RuntimeDefault, no host access",
  "service-account": "a ServiceAccount of its own, no token mounted in a workload",
  rbac: "no API right but a setup Job's: get/create/patch on the Secrets it makes, by name",
  job: "a setup Job is bounded (deadline, retries, one pod), cleans up after itself (TTL) and makes what the overlay needs",
  "service-links": "no Service environment variables (they collide with KEELSON_*)",
  pdb: "a PodDisruptionBudget that selects it and allows one disruption",
  netpol: "a default deny, and a NetworkPolicy of its own",
  spread: "topology spread across nodes and zones",
  image: "every image pinned by a tag, never latest; one keelson tag",
  grace: "termination grace period covers preStop, drain and shutdown deadline",
  metrics: "a port named metrics, bound to 0.0.0.0, with scrape annotations",
  replicas: "replica counts of the overlay",
  brokers: "KEELSON_BROKER_URL lists exactly the brokers; their ports are exposed",
  hpa: "the gateway scales on an HPA matching KEELSON_GATEWAY_REPLICAS",
  config: "configuration: documented names, no secret in a ConfigMap",
  flows: "NetworkPolicies let through what must pass and nothing that must not",
  "render-diff": "every kubectl renders the same objects",
  "secret-literal": "no Secret value committed in the tree",
};

// The Secrets the dev overlay's Job makes in the cluster
// (k8s/overlays/dev/secrets-job.yaml), with the keys it gives each.
const DEV_SECRETS = {
  "keelson-postgres": ["owner-dsn", ...["auth", "billing", "ledger", "webhook", "summary"].map((s) => `${s}-login-dsn`)],
  "keelson-redis": ["url"],
  "keelson-dev-postgres-server": [
    "superuser-password",
    "owner-password",
    ...["auth", "billing", "ledger", "webhook", "summary"].map((s) => `${s}-login-password`),
  ],
  "keelson-dev-redis-server": ["password", "redis.conf"],
};

// What each overlay promises (docs/operations.md, "Kubernetes").
// externalSecrets: made by hand before the apply; jobSecrets: made by a Job
// of the overlay, which is the only holder of API rights.
const PROFILES = {
  dev: { serviceReplicas: [1, 1], brokers: [2, 8], hpaMin: 1, externalSecrets: [], jobSecrets: DEV_SECRETS, flows: true },
  prod: {
    serviceReplicas: [3, 1000],
    brokers: [3, 8],
    hpaMin: 3,
    externalSecrets: ["keelson-postgres", "keelson-redis"],
    jobSecrets: {},
    flows: true,
  },
  default: { serviceReplicas: [1, 1000], brokers: [1, 8], hpaMin: 1, externalSecrets: [], jobSecrets: {}, flows: false },
};
// The rights a setup Job may hold on the Secrets it makes: get, and create
// or patch by server-side apply (a create by apply is authorised by name).
const JOB_VERBS = new Set(["get", "create", "patch"]);

// Kubernetes' own numbers: KS_SHUTDOWN_DEADLINE_MS (services/core/ks_shutdown.h).
const SHUTDOWN_DEADLINE_S = 15;
// Broker ports, as offsets from the base (services/core/ks_topology.h).
const SERVICE_IDS = { auth: 0, billing: 1, ledger: 2, webhook: 3, summary: 4 };
const BROKER_OFFSETS = [...Object.values(SERVICE_IDS).flatMap((i) => [2 * i, 2 * i + 1]), 40, 41];

// ---- reporting ---------------------------------------------------------------

const failures = [];
let checks = 0;

function check(ok, overlay, rule, object, msg) {
  if (!(rule in RULES)) throw new Error(`unknown rule ${rule}`);
  checks++;
  if (!ok) failures.push({ overlay, rule, object, msg });
  return ok;
}

const id = (o) => `${o?.kind ?? "?"}/${o?.metadata?.name ?? "?"}`;

// ---- arguments ---------------------------------------------------------------

function parseArgs(argv) {
  const a = { overlays: [], adds: {}, source: null, configDoc: null, expect: null };
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i + 1];
    switch (argv[i]) {
      case "--overlay": {
        const [name, files] = v.split("=");
        a.overlays.push({ name, files: files.split(",") });
        i++;
        break;
      }
      case "--add": {
        const [name, file] = v.split("=");
        (a.adds[name] ??= []).push(file);
        i++;
        break;
      }
      case "--source":
        a.source = v;
        i++;
        break;
      case "--config-doc":
        a.configDoc = v;
        i++;
        break;
      case "--expect": {
        // "all,-flows": every rule but flows.
        const items = v.split(",").filter(Boolean);
        const set = new Set(items.includes("all") ? Object.keys(RULES) : []);
        for (const r of items) {
          if (r === "all") continue;
          if (r.startsWith("-")) set.delete(r.slice(1));
          else set.add(r);
        }
        a.expect = [...set];
        i++;
        break;
      }
      default:
        console.error(`check.mjs: unknown argument ${argv[i]}`);
        process.exit(2);
    }
  }
  return a;
}

// ---- loading -----------------------------------------------------------------

function loadDocs(file, overlay) {
  const docs = [];
  for (const d of parseAllDocuments(fs.readFileSync(file, "utf8"))) {
    if (!check(d.errors.length === 0, overlay, "parse", file, d.errors.map(String).join("; "))) continue;
    const o = d.toJS();
    if (o != null) docs.push(o);
  }
  return docs;
}

// ---- schema: kubernetes-models, then unknown fields from its declarations -----

const ALLOWED = {
  "v1/Namespace": "v1/Namespace",
  "v1/ServiceAccount": "v1/ServiceAccount",
  "v1/Service": "v1/Service",
  "v1/ConfigMap": "v1/ConfigMap",
  "v1/Secret": "v1/Secret",
  "apps/v1/Deployment": "apps/v1/Deployment",
  "apps/v1/StatefulSet": "apps/v1/StatefulSet",
  "policy/v1/PodDisruptionBudget": "policy/v1/PodDisruptionBudget",
  "autoscaling/v2/HorizontalPodAutoscaler": "autoscaling/v2/HorizontalPodAutoscaler",
  "networking.k8s.io/v1/NetworkPolicy": "networking.k8s.io/v1/NetworkPolicy",
  "batch/v1/Job": "batch/v1/Job",
  "rbac.authorization.k8s.io/v1/Role": "rbac.authorization.k8s.io/v1/Role",
  "rbac.authorization.k8s.io/v1/RoleBinding": "rbac.authorization.k8s.io/v1/RoleBinding",
  "rbac.authorization.k8s.io/v1/ClusterRole": "rbac.authorization.k8s.io/v1/ClusterRole",
  "rbac.authorization.k8s.io/v1/ClusterRoleBinding": "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
};

async function validateSchema(o, overlay) {
  const key = `${o.apiVersion}/${o.kind}`;
  if (!check(key in ALLOWED, overlay, "api-version", id(o), `${key} is not one of ${Object.keys(ALLOWED).join(", ")}`))
    return;
  const mod = await import(`kubernetes-models/${ALLOWED[key]}`);
  const Model = mod[o.kind];
  let err = null;
  try {
    new Model(schemaView(o)).validate();
  } catch (e) {
    err = e.message;
  }
  check(err === null, overlay, "schema", id(o), err);
  const d = declFile(path.join(MODELS, "kubernetes-models", `${ALLOWED[key]}.d.ts`));
  for (const p of unknownFields(o, d, "")) check(false, overlay, "unknown-field", id(o), `${p} is not a field of the API`);
}

// A current kubectl writes a Secret's long base64 values over several lines;
// the API server's decoder skips the line breaks, the schema's "byte"
// format does not.
function schemaView(o) {
  if (o.kind !== "Secret" || !o.data) return o;
  const data = Object.fromEntries(Object.entries(o.data).map(([k, v]) => [k, String(v).replace(/\s+/g, "")]));
  return { ...o, data };
}

// Each model's .d.ts declares its interface, one quoted property a line, and
// imports the interfaces of its fields. Parsed once per file.
const declCache = new Map();

function declFile(file) {
  if (declCache.has(file)) return declCache.get(file);
  const text = fs.readFileSync(file, "utf8");
  const imports = {};
  for (const m of text.matchAll(/^import \{ (\w+) \} from "([^"]+)";$/gm)) {
    const spec = m[2].replace(/\.js$/, "");
    imports[m[1]] = spec.startsWith(".")
      ? path.join(path.dirname(file), `${spec}.d.ts`)
      : path.join(MODELS, `${spec}.d.ts`);
  }
  const start = text.search(/^export interface \w+[^{]*\{$/m);
  let props = null; // null: not an object (a string alias such as Quantity)
  if (start >= 0) {
    props = {};
    const lines = text.slice(start).split("\n").slice(1);
    let cur = null;
    for (const line of lines) {
      if (line === "}") break;
      const m = line.match(/^ {4}"([^"]+)"\??: (.*)$/);
      if (m) {
        cur = m[1];
        props[cur] = m[2];
      } else if (cur && /^ {5,}\S/.test(line) && !/^\s*(\/\*\*|\*)/.test(line)) {
        props[cur] += ` ${line.trim()}`;
      } else if (/^ {4}(\/\*\*| \*)/.test(line)) {
        cur = null;
      }
    }
  }
  const d = { imports, props };
  declCache.set(file, d);
  return d;
}

// The type of one property: a referenced interface, an array or a string map
// of one, or a leaf.
function typeOf(decl, text) {
  const ref = (t) => {
    t = t.trim();
    if (t.startsWith("{")) return inlineDecl(decl, t);
    const m = t.match(/\b(I[A-Za-z0-9]+)\b/);
    return m && decl.imports[m[1]] ? declFile(decl.imports[m[1]]) : null;
  };
  if (text.startsWith("Array<")) return { array: true, of: ref(text.slice(6)) };
  if (text.startsWith("{") && text.includes("[key: string]:")) return { map: true, of: ref(text.slice(text.indexOf("]:") + 2)) };
  return { of: ref(text) };
}

// An object type declared in place, `{ "a"?: string; "b"?: IFoo; }` (a
// StatefulSet's volumeClaimTemplates): its members, split at the top level.
function inlineDecl(decl, text) {
  const props = {};
  let depth = 0;
  let member = "";
  for (const ch of text) {
    if (ch === "{" || ch === "<") depth++;
    if (ch === "}" || ch === ">") depth--;
    if (depth === 0) break;
    if (depth === 1 && ch === ";") {
      const m = member.trim().match(/^"([^"]+)"\??: (.*)$/);
      if (m) props[m[1]] = m[2];
      member = "";
    } else if (!(depth === 1 && ch === "{" && member === "")) member += ch;
  }
  return { imports: decl.imports, props };
}

function* unknownFields(v, decl, at) {
  if (!decl?.props || v == null || typeof v !== "object" || Array.isArray(v)) return;
  for (const [k, child] of Object.entries(v)) {
    const p = at ? `${at}.${k}` : k;
    if (!(k in decl.props)) {
      yield p;
      continue;
    }
    const t = typeOf(decl, decl.props[k]);
    if (!t.of) continue;
    if (t.array && Array.isArray(child)) {
      for (let i = 0; i < child.length; i++) yield* unknownFields(child[i], t.of, `${p}[${i}]`);
    } else if (t.map && child && typeof child === "object") {
      for (const [mk, mv] of Object.entries(child)) yield* unknownFields(mv, t.of, `${p}.${mk}`);
    } else {
      yield* unknownFields(child, t.of, p);
    }
  }
}

// ---- names and selectors -------------------------------------------------------

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_1035 = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const PORT_NAME = /^(?=.*[a-z])(?!.*--)[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function checkNames(o, overlay) {
  const n = o.metadata?.name ?? "";
  const svc = o.kind === "Service";
  check(
    svc ? DNS_1035.test(n) && n.length <= 63 : SUBDOMAIN.test(n) && n.length <= 253,
    overlay,
    "name",
    id(o),
    `"${n}" is not a DNS-1123 ${svc ? "label starting with a letter" : "subdomain"}`,
  );
  for (const c of podSpec(o)?.containers ?? []) {
    check(DNS_LABEL.test(c.name ?? "") && c.name.length <= 63, overlay, "name", id(o), `container "${c.name}"`);
    for (const p of c.ports ?? [])
      if (p.name)
        check(PORT_NAME.test(p.name) && p.name.length <= 15, overlay, "name", id(o), `port name "${p.name}"`);
  }
  for (const p of svc ? (o.spec?.ports ?? []) : [])
    if (p.name) check(PORT_NAME.test(p.name) && p.name.length <= 15, overlay, "name", id(o), `port name "${p.name}"`);
}

function matches(sel, labels) {
  if (sel == null) return false;
  labels ??= {};
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of sel.matchExpressions ?? []) {
    const has = e.key in labels;
    const inv = (e.values ?? []).includes(labels[e.key]);
    if (e.operator === "In" && !(has && inv)) return false;
    if (e.operator === "NotIn" && has && inv) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

const emptySelector = (s) => !s || (!Object.keys(s.matchLabels ?? {}).length && !(s.matchExpressions ?? []).length);

// ---- the workloads' rules ------------------------------------------------------

// Workloads run for good (probes, PDB, spread...); a Job runs once. Both have
// pods, and every pod gets the rules of images, resources, security,
// ServiceAccount, NetworkPolicy and references.
const WORKLOADS = new Set(["Deployment", "StatefulSet"]);
const POD_KINDS = new Set([...WORKLOADS, "Job"]);
const podSpec = (o) => (POD_KINDS.has(o.kind) ? o.spec?.template?.spec : null);
const podLabels = (o) => o.spec?.template?.metadata?.labels ?? {};
const isKeelson = (c) => /(^|\/)keelson(:|@|$)/.test(c.image ?? "");
const svcName = (c) => (c.command?.[0] ?? "").match(/keelson-([a-z]+)$/)?.[1];

function imageTag(image) {
  const at = image.indexOf("@");
  if (at >= 0) return { digest: image.slice(at + 1) };
  const slash = image.lastIndexOf("/");
  const colon = image.lastIndexOf(":");
  return { tag: colon > slash ? image.slice(colon + 1) : null };
}

function checkImages(w, ctx) {
  for (const c of allContainers(w)) {
    const t = imageTag(c.image ?? "");
    check(
      Boolean(t.digest) || (t.tag && t.tag !== "latest"),
      ctx.name,
      "image",
      id(w),
      `${c.name}: image "${c.image}" is not pinned by a tag (or is latest)`,
    );
    if (isKeelson(c)) ctx.keelsonTags.add(t.tag ?? t.digest);
  }
}

const allContainers = (w) => [...(podSpec(w)?.initContainers ?? []), ...(podSpec(w)?.containers ?? [])];

function checkProbes(w, ctx) {
  for (const c of podSpec(w)?.containers ?? []) {
    check(Boolean(c.livenessProbe), ctx.name, "probes", id(w), `${c.name}: no livenessProbe`);
    check(Boolean(c.readinessProbe), ctx.name, "probes", id(w), `${c.name}: no readinessProbe`);
    if (!isKeelson(c)) continue;
    // keelson's binaries serve both on their health listener (docs/operations.md).
    const want = { livenessProbe: "/healthz", readinessProbe: "/readyz", startupProbe: "/healthz" };
    for (const [p, pathWanted] of Object.entries(want)) {
      const g = c[p]?.httpGet;
      if (!c[p] && p === "startupProbe") continue;
      check(
        g?.path === pathWanted && g?.port === "metrics",
        ctx.name,
        "probes",
        id(w),
        `${c.name}: ${p} must be GET ${pathWanted} on the port "metrics"`,
      );
    }
  }
}

const CPU = (q) => {
  const s = String(q);
  return s.endsWith("m") ? Number(s.slice(0, -1)) / 1000 : Number(s);
};
const MEM_UNITS = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 };
const MEM = (q) => {
  const m = String(q).match(/^([0-9.]+)([A-Za-z]*)$/);
  return m ? Number(m[1]) * (MEM_UNITS[m[2]] ?? (m[2] === "" ? 1 : NaN)) : NaN;
};

function checkResources(w, ctx) {
  for (const c of allContainers(w)) {
    const r = c.resources ?? {};
    for (const kind of ["requests", "limits"])
      for (const res of ["cpu", "memory"])
        check(r[kind]?.[res] != null, ctx.name, "resources", id(w), `${c.name}: no ${kind}.${res}`);
    if (r.requests?.cpu != null && r.limits?.cpu != null)
      check(CPU(r.requests.cpu) <= CPU(r.limits.cpu), ctx.name, "resources", id(w), `${c.name}: cpu request > limit`);
    if (r.requests?.memory != null && r.limits?.memory != null)
      check(MEM(r.requests.memory) <= MEM(r.limits.memory), ctx.name, "resources", id(w), `${c.name}: memory request > limit`);
  }
}

// Pod Security Standards, "restricted", and a read-only root filesystem.
const VOLUME_TYPES = new Set(["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"]);

function checkSecurity(w, ctx) {
  const s = podSpec(w) ?? {};
  const psc = s.securityContext ?? {};
  const fail = (ok, msg) => check(ok, ctx.name, "security", id(w), msg);
  fail(!s.hostNetwork && !s.hostPID && !s.hostIPC, "host namespaces are shared");
  for (const v of s.volumes ?? []) {
    const type = Object.keys(v).find((k) => k !== "name");
    fail(VOLUME_TYPES.has(type), `volume ${v.name} is of type ${type}`);
  }
  fail(psc.runAsUser !== 0 && psc.runAsGroup !== 0, "the pod runs as uid or gid 0");
  for (const c of allContainers(w)) {
    const sc = c.securityContext ?? {};
    fail(sc.runAsNonRoot === true || (psc.runAsNonRoot === true && sc.runAsNonRoot !== false), `${c.name}: runAsNonRoot is not true`);
    fail(sc.runAsUser !== 0 && sc.runAsGroup !== 0, `${c.name}: runs as uid or gid 0`);
    if (isKeelson(c)) fail((sc.runAsUser ?? psc.runAsUser) === 10001, `${c.name}: keelson runs as uid 10001 (deploy/container)`);
    fail(sc.readOnlyRootFilesystem === true, `${c.name}: readOnlyRootFilesystem is not true`);
    fail(sc.allowPrivilegeEscalation === false, `${c.name}: allowPrivilegeEscalation is not false`);
    fail(sc.privileged !== true, `${c.name}: privileged`);
    fail((sc.capabilities?.drop ?? []).includes("ALL"), `${c.name}: capabilities.drop lacks ALL`);
    fail(!(sc.capabilities?.add ?? []).length, `${c.name}: adds capabilities ${sc.capabilities?.add}`);
    const seccomp = sc.seccompProfile?.type ?? psc.seccompProfile?.type;
    fail(seccomp === "RuntimeDefault", `${c.name}: seccompProfile is ${seccomp ?? "unset"}, not RuntimeDefault`);
  }
}

function checkServiceAccount(w, ctx) {
  const s = podSpec(w) ?? {};
  const name = s.serviceAccountName;
  const fail = (ok, msg) => check(ok, ctx.name, "service-account", id(w), msg);
  fail(Boolean(name) && name !== "default", "no ServiceAccount of its own");
  fail(s.automountServiceAccountToken === false, "automountServiceAccountToken is not false in the pod");
  const sa = ctx.byKind("ServiceAccount").find((x) => x.metadata.name === name);
  if (fail(Boolean(sa), `ServiceAccount ${name ?? "(none)"} is not in the overlay`))
    fail(sa.automountServiceAccountToken === false, `ServiceAccount ${name} mounts a token`);
  const count = ctx.users.get(name) ?? 0;
  fail(count === 1, `ServiceAccount ${name} is shared by ${count} workloads`);
  // A token mounted by hand (a projected volume) is the same as one mounted
  // automatically: only a setup Job may have one, to use the rights of its
  // Role (the rule rbac).
  if (WORKLOADS.has(w.kind))
    for (const v of s.volumes ?? [])
      fail(!(v.projected?.sources ?? []).some((x) => x.serviceAccountToken), `volume ${v.name} mounts a ServiceAccount token`);
  check(s.enableServiceLinks === false, ctx.name, "service-links", id(w), "enableServiceLinks is not false");
}

function checkPdb(w, ctx) {
  const pdbs = ctx.byKind("PodDisruptionBudget").filter((p) => matches(p.spec?.selector, podLabels(w)));
  if (!check(pdbs.length === 1, ctx.name, "pdb", id(w), `${pdbs.length} PodDisruptionBudgets select it, not 1`)) return;
  const { maxUnavailable, minAvailable } = pdbs[0].spec;
  const replicas = w.spec.replicas ?? 1;
  const allows = maxUnavailable != null ? String(maxUnavailable) !== "0" && maxUnavailable !== "0%" : Number(minAvailable) < replicas;
  check(allows, ctx.name, "pdb", id(w), `${id(pdbs[0])} never allows a disruption: a node drain would hang`);
}

function checkNetpol(w, ctx) {
  const own = ctx.byKind("NetworkPolicy").filter((p) => !emptySelector(p.spec?.podSelector) && matches(p.spec.podSelector, podLabels(w)));
  check(own.length > 0, ctx.name, "netpol", id(w), "no NetworkPolicy selects it (besides the default deny)");
}

function checkSpread(w, ctx) {
  const tsc = podSpec(w)?.topologySpreadConstraints ?? [];
  for (const key of ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]) {
    const c = tsc.find((t) => t.topologyKey === key);
    check(Boolean(c), ctx.name, "spread", id(w), `no topologySpreadConstraint on ${key}`);
    if (c) check(matches(c.labelSelector, podLabels(w)), ctx.name, "spread", id(w), `${key}: its labelSelector misses the pods`);
  }
}

function checkSelector(w, ctx) {
  const sel = w.spec?.selector;
  check(!emptySelector(sel) && matches(sel, podLabels(w)), ctx.name, "selector", id(w), "spec.selector does not match the pod template's labels");
  const others = ctx.workloads.filter((o) => o !== w && matches(sel, podLabels(o)));
  check(others.length === 0, ctx.name, "selector", id(w), `its selector also matches ${others.map(id)}`);
  if (w.kind === "StatefulSet") {
    const svc = ctx.byKind("Service").find((s) => s.metadata.name === w.spec.serviceName);
    check(svc?.spec?.clusterIP === "None", ctx.name, "selector", id(w), `serviceName ${w.spec.serviceName} is no headless Service`);
  }
}

function checkRefs(w, ctx) {
  const s = podSpec(w) ?? {};
  const want = [];
  for (const c of allContainers(w)) {
    for (const e of c.envFrom ?? []) {
      if (e.configMapRef) want.push(["ConfigMap", e.configMapRef.name]);
      if (e.secretRef) want.push(["Secret", e.secretRef.name]);
    }
    for (const e of c.env ?? []) {
      const k = e.valueFrom?.secretKeyRef;
      if (k) want.push(["Secret", k.name, k.key, `${c.name} ${e.name}`]);
      const m = e.valueFrom?.configMapKeyRef;
      if (m) want.push(["ConfigMap", m.name, m.key, `${c.name} ${e.name}`]);
    }
  }
  for (const v of s.volumes ?? []) {
    for (const [kind, src, name] of [["Secret", v.secret, v.secret?.secretName], ["ConfigMap", v.configMap, v.configMap?.name]]) {
      if (!src) continue;
      want.push([kind, name]);
      for (const item of src.items ?? []) want.push([kind, name, item.key, `volume ${v.name}`]);
    }
  }
  for (const [kind, name, key, what] of want) {
    const o = ctx.byKind(kind).find((x) => x.metadata.name === name);
    if (!o && kind === "Secret" && ctx.profile.externalSecrets.includes(name)) {
      if (key) ctx.externalKeys.add(`${name}/${key}`);
      continue;
    }
    // Made in the cluster by the overlay's Job (the rule rbac checks that
    // one may): the keys are those the Job writes.
    const made = !o && kind === "Secret" ? ctx.profile.jobSecrets[name] : null;
    if (made) {
      ctx.jobSecretsUsed.add(name);
      if (key) check(made.includes(key), ctx.name, "refs", id(w), `${what ?? ""}: the Job makes Secret ${name} without a key ${key}`);
      continue;
    }
    if (!check(Boolean(o), ctx.name, "refs", id(w), `${kind} ${name} is not in the overlay`)) continue;
    if (key) {
      const data = { ...(o.data ?? {}), ...(o.stringData ?? {}) };
      check(key in data, ctx.name, "refs", id(w), `${what ?? ""}: ${kind} ${name} has no key ${key}`);
    }
  }
}

// After SIGTERM: the preStop sleep, the gateway's drain, then the shutdown
// deadline, after which the binary exits by itself. The kubelet's SIGKILL
// must come later.
function checkGrace(w, ctx) {
  const s = podSpec(w) ?? {};
  for (const c of s.containers ?? []) {
    if (!isKeelson(c)) continue;
    const sleep = c.lifecycle?.preStop?.sleep?.seconds ?? 0;
    const drain = svcName(c) === "gateway" ? Number(ctx.config.KEELSON_GATEWAY_DRAIN_MS ?? 10000) / 1000 : 0;
    const need = sleep + drain + SHUTDOWN_DEADLINE_S;
    const grace = s.terminationGracePeriodSeconds ?? 30;
    check(
      grace > need && grace <= need + 15,
      ctx.name,
      "grace",
      id(w),
      `terminationGracePeriodSeconds ${grace}: must exceed preStop ${sleep} s + drain ${drain} s + deadline ${SHUTDOWN_DEADLINE_S} s (and not by more than 15 s)`,
    );
  }
}

// Each binary serves /metrics on its health listener: KEELSON_<SVC>_HTTP_*
// (the gateway's admin listener: KEELSON_GATEWAY_ADMIN_*).
function checkMetrics(w, ctx) {
  const s = podSpec(w) ?? {};
  const ann = w.spec?.template?.metadata?.annotations ?? {};
  for (const c of s.containers ?? []) {
    if (!isKeelson(c)) continue;
    const svc = svcName(c);
    if (!check(Boolean(svc), ctx.name, "metrics", id(w), `${c.name}: command does not name a keelson binary`)) continue;
    const prefix = svc === "gateway" ? "KEELSON_GATEWAY_ADMIN_" : `KEELSON_${svc.toUpperCase()}_HTTP_`;
    const env = envOf(c, ctx);
    const port = (c.ports ?? []).find((p) => p.name === "metrics");
    const fail = (ok, msg) => check(ok, ctx.name, "metrics", id(w), `${c.name}: ${msg}`);
    if (!fail(Boolean(port), 'no container port named "metrics"')) continue;
    fail(String(port.containerPort) === env[`${prefix}PORT`], `port metrics ${port.containerPort} but ${prefix}PORT=${env[`${prefix}PORT`]}`);
    fail(env[`${prefix}HOST`] === "0.0.0.0", `${prefix}HOST=${env[`${prefix}HOST`] ?? "(default 127.0.0.1)"}: probes and scrapes need 0.0.0.0`);
    fail(ann["prometheus.io/scrape"] === "true", "no prometheus.io/scrape: true");
    fail(ann["prometheus.io/port"] === String(port.containerPort), `prometheus.io/port is ${ann["prometheus.io/port"]}`);
    fail(ann["prometheus.io/path"] === "/metrics", `prometheus.io/path is ${ann["prometheus.io/path"]}`);
    if (svc === "gateway") {
      const api = (c.ports ?? []).find((p) => p.name === "http");
      fail(api && String(api.containerPort) === env.KEELSON_GATEWAY_PORT, "port http differs from KEELSON_GATEWAY_PORT");
      fail(env.KEELSON_GATEWAY_HOST === "0.0.0.0", "KEELSON_GATEWAY_HOST is not 0.0.0.0");
    }
  }
}

// A container's environment as the kubelet makes it: envFrom, then env.
function envOf(c, ctx) {
  const env = {};
  for (const e of c.envFrom ?? []) {
    const cm = e.configMapRef && ctx.byKind("ConfigMap").find((x) => x.metadata.name === e.configMapRef.name);
    Object.assign(env, cm?.data ?? {});
  }
  for (const e of c.env ?? []) env[e.name] = e.value ?? "(from a reference)";
  return env;
}

function checkReplicas(w, ctx) {
  const c = podSpec(w)?.containers?.[0];
  const svc = c && isKeelson(c) ? svcName(c) : null;
  const hpa = ctx.byKind("HorizontalPodAutoscaler").find((h) => h.spec?.scaleTargetRef?.kind === w.kind && h.spec.scaleTargetRef.name === w.metadata.name);
  const n = hpa ? hpa.spec.minReplicas ?? 1 : w.spec?.replicas ?? 1;
  if (svc === "broker") {
    const [lo, hi] = ctx.profile.brokers;
    check(n >= lo && n <= hi, ctx.name, "replicas", id(w), `${n} brokers, not ${lo}..${hi}`);
  } else if (svc === "gateway") {
    check(Boolean(hpa), ctx.name, "replicas", id(w), "no HorizontalPodAutoscaler decides the gateway's count");
    if (hpa) check(n >= ctx.profile.hpaMin, ctx.name, "replicas", id(w), `the gateway's HPA minimum is ${n}, not at least ${ctx.profile.hpaMin}`);
    check(hpa == null || w.spec.replicas == null, ctx.name, "replicas", id(w), "replicas is set beside an HPA (every apply would reset the count)");
  } else if (svc) {
    const [lo, hi] = ctx.profile.serviceReplicas;
    check(n >= lo && n <= hi, ctx.name, "replicas", id(w), `${n} replicas, not ${lo}..${hi}`);
  }
}

// ---- the setup Job and API rights ---------------------------------------------------

// A Job runs once: no probe, PDB or spread, but bounds on how long and how
// often, a TTL so that a later apply makes it anew, and pods that nothing
// long-lived selects.
function checkJob(j, ctx) {
  const sp = j.spec ?? {};
  const fail = (ok, msg) => check(ok, ctx.name, "job", id(j), msg);
  const within = (v, lo, hi) => Number.isInteger(v) && v >= lo && v <= hi;
  fail(within(sp.ttlSecondsAfterFinished, 1, 86400), `ttlSecondsAfterFinished ${sp.ttlSecondsAfterFinished ?? "unset"}: 1 s to a day, so that it goes away and the next apply runs it again`);
  fail(within(sp.activeDeadlineSeconds, 1, 3600), `activeDeadlineSeconds ${sp.activeDeadlineSeconds ?? "unset"}: 1 s to an hour`);
  fail(within(sp.backoffLimit, 0, 6), `backoffLimit ${sp.backoffLimit ?? "unset (6)"}: set it, 6 at most`);
  fail((sp.parallelism ?? 1) === 1 && (sp.completions ?? 1) === 1, "one pod at a time, one completion: two writers would race");
  fail(["Never", "OnFailure"].includes(podSpec(j)?.restartPolicy), `restartPolicy ${podSpec(j)?.restartPolicy}: Never or OnFailure`);
  const labels = podLabels(j);
  const by = [
    ...ctx.workloads.filter((w) => matches(w.spec?.selector, labels)).map(id),
    ...ctx.byKind("Service").filter((x) => x.spec?.selector && matches({ matchLabels: x.spec.selector }, labels)).map(id),
    ...ctx.byKind("PodDisruptionBudget").filter((x) => matches(x.spec?.selector, labels)).map(id),
  ];
  check(!by.length, ctx.name, "selector", id(j), `its pods are selected by ${by.join(", ")}`);
}

// API rights: none cluster-wide; a Role may grant only get/create/patch on
// Secrets a Job of the overlay makes, by name; only a Job's ServiceAccount
// may be bound to one, never one a workload runs as; and every Secret the
// profile leaves to a Job must be one some Job may create.
function checkRbac(ctx) {
  const fail = (ok, o, msg) => check(ok, ctx.name, "rbac", id(o), msg);
  const ns = ctx.workloads[0]?.metadata?.namespace ?? "keelson";
  const makes = new Set(Object.keys(ctx.profile.jobSecrets));
  for (const o of [...ctx.byKind("ClusterRole"), ...ctx.byKind("ClusterRoleBinding")]) fail(false, o, "cluster-wide rights: keelson needs none");
  const grants = new Map(); // Role -> Secret -> verbs
  for (const r of ctx.byKind("Role")) {
    const g = new Map();
    grants.set(r.metadata.name, g);
    for (const [i, rule] of (r.rules ?? []).entries()) {
      const at = `rules[${i}]`;
      const secrets = JSON.stringify(rule.apiGroups) === '[""]' && JSON.stringify(rule.resources) === '["secrets"]';
      fail(secrets, r, `${at}: ${rule.apiGroups}/${rule.resources}: only Secrets (apiGroups [""], resources [secrets])`);
      const names = rule.resourceNames ?? [];
      fail(names.length > 0, r, `${at}: no resourceNames, so every Secret of the namespace`);
      for (const n of names) fail(makes.has(n), r, `${at}: Secret ${n} is not one a Job of this overlay makes`);
      for (const v of rule.verbs ?? []) fail(JOB_VERBS.has(v), r, `${at}: verb ${v}, beyond ${[...JOB_VERBS].join("/")}`);
      if (secrets)
        for (const n of names) for (const v of rule.verbs ?? []) (g.get(n) ?? g.set(n, new Set()).get(n)).add(v);
    }
  }
  const runAs = new Map(); // ServiceAccount -> the objects whose pods run as it
  for (const o of [...ctx.workloads, ...ctx.jobs]) {
    const sa = podSpec(o)?.serviceAccountName;
    (runAs.get(sa) ?? runAs.set(sa, []).get(sa)).push(o);
  }
  const held = new Map(); // ServiceAccount -> Secret -> verbs
  for (const b of ctx.byKind("RoleBinding")) {
    const ref = b.roleRef ?? {};
    fail(ref.kind === "Role" && grants.has(ref.name), b, `roleRef ${ref.kind}/${ref.name}: only a Role of the overlay`);
    for (const sub of b.subjects ?? []) {
      fail(sub.kind === "ServiceAccount" && (sub.namespace ?? ns) === ns, b, `subject ${sub.kind}/${sub.name}: only a ServiceAccount of the namespace`);
      const users = runAs.get(sub.name) ?? [];
      fail(users.length > 0 && users.every((o) => o.kind === "Job"), b, `binds ServiceAccount ${sub.name}, which ${users.length ? users.map(id).join(", ") : "no Job"} runs as: only a Job may hold API rights`);
      const h = held.get(sub.name) ?? held.set(sub.name, new Map()).get(sub.name);
      for (const [n, verbs] of grants.get(ref.name) ?? []) for (const v of verbs) (h.get(n) ?? h.set(n, new Set()).get(n)).add(v);
    }
  }
  for (const n of makes) {
    const ok = ctx.jobs.some((j) => {
      const v = held.get(podSpec(j)?.serviceAccountName)?.get(n);
      return v?.has("create") && v?.has("patch");
    });
    check(ok, ctx.name, "job", `Secret/${n}`, "left to a Job, but no Job of the overlay may create it (create and patch on it, bound to its ServiceAccount)");
  }
  for (const n of ctx.jobSecretsUsed) check(makes.has(n), ctx.name, "job", `Secret/${n}`, "used, but no Job makes it");
}

// ---- keelson's wiring ------------------------------------------------------------

function checkBrokers(ctx) {
  const sts = ctx.workloads.find((w) => w.kind === "StatefulSet" && svcName(podSpec(w).containers[0]) === "broker");
  if (!check(Boolean(sts), ctx.name, "brokers", "StatefulSet/?", "no broker StatefulSet")) return;
  const urls = (ctx.config.KEELSON_BROKER_URL ?? "").split(",").map((s) => s.trim());
  const n = sts.spec.replicas ?? 1;
  const base = Number(urls[0]?.match(/:(\d+)$/)?.[1]);
  const want = Array.from({ length: n }, (_, i) => `tcp://${sts.metadata.name}-${i}.${sts.spec.serviceName}:${base}`);
  check(
    JSON.stringify(urls) === JSON.stringify(want),
    ctx.name,
    "brokers",
    id(sts),
    `KEELSON_BROKER_URL is ${urls.join(",")}; with ${n} replicas it must be ${want.join(",")}`,
  );
  const c = podSpec(sts).containers[0];
  const own = (c.env ?? []).find((e) => e.name === "KEELSON_BROKER_URL")?.value;
  check(own === `tcp://0.0.0.0:${base}`, ctx.name, "brokers", id(sts), `the broker listens on ${own}, not tcp://0.0.0.0:${base}`);
  const svc = ctx.byKind("Service").find((s) => s.metadata.name === sts.spec.serviceName);
  const have = new Set((svc?.spec?.ports ?? []).map((p) => p.port));
  const cports = new Set((c.ports ?? []).map((p) => p.containerPort));
  for (const off of BROKER_OFFSETS) {
    check(have.has(base + off), ctx.name, "brokers", id(svc ?? sts), `the Service does not expose ${base + off} (base + ${off})`);
    check(cports.has(base + off), ctx.name, "brokers", id(sts), `the container does not declare ${base + off} (base + ${off})`);
  }
  check(svc?.spec?.publishNotReadyAddresses === true, ctx.name, "brokers", id(svc ?? sts), "publishNotReadyAddresses is not true");
}

function checkHpa(ctx) {
  const gw = ctx.workloads.find((w) => svcName(podSpec(w).containers[0] ?? {}) === "gateway");
  if (!gw) return;
  const hpa = ctx.byKind("HorizontalPodAutoscaler").find((h) => h.spec?.scaleTargetRef?.name === gw.metadata.name);
  if (!check(Boolean(hpa), ctx.name, "hpa", id(gw), "no HorizontalPodAutoscaler targets the gateway")) return;
  check(hpa.spec.scaleTargetRef.kind === "Deployment" && hpa.spec.scaleTargetRef.apiVersion === "apps/v1", ctx.name, "hpa", id(hpa), "scaleTargetRef is not the Deployment");
  check((hpa.spec.metrics ?? []).some((m) => m.resource?.name === "cpu"), ctx.name, "hpa", id(hpa), "does not scale on CPU");
  check(
    String(hpa.spec.maxReplicas) === ctx.config.KEELSON_GATEWAY_REPLICAS,
    ctx.name,
    "hpa",
    id(hpa),
    `maxReplicas ${hpa.spec.maxReplicas} but KEELSON_GATEWAY_REPLICAS=${ctx.config.KEELSON_GATEWAY_REPLICAS}`,
  );
  const svc = ctx.byKind("Service").find((s) => matches({ matchLabels: s.spec?.selector ?? {} }, podLabels(gw)) && !emptySelector({ matchLabels: s.spec?.selector }));
  if (check(Boolean(svc), ctx.name, "selector", id(gw), "no Service selects the gateway")) {
    const ports = (svc.spec.ports ?? []).map((p) => p.targetPort);
    check(!ports.includes("metrics") && !ports.includes(7470), ctx.name, "metrics", id(svc), "the admin port is in the gateway's Service");
  }
}

const SECRETISH_KEY = /PASSWORD|SECRET|TOKEN|DSN|_KEY$/i;
const URL_CREDENTIALS = /:\/\/[^/\s:@]*:(?![$<{])[^/\s@]+@/;

function checkConfig(ctx, documented) {
  for (const cm of ctx.byKind("ConfigMap")) {
    for (const [k, v] of Object.entries(cm.data ?? {})) {
      if (!k.startsWith("KEELSON_")) continue;
      check(!SECRETISH_KEY.test(k) && !URL_CREDENTIALS.test(String(v)), ctx.name, "config", id(cm), `${k} looks secret: it belongs in a Secret`);
      if (documented) check(documented.has(k), ctx.name, "config", id(cm), `${k} is not in docs/configuration.md (misspelt? a binary ignores it)`);
    }
  }
  for (const w of ctx.workloads)
    for (const c of allContainers(w))
      if (isKeelson(c))
        for (const e of c.env ?? []) {
          if (documented) check(documented.has(e.name), ctx.name, "config", id(w), `${e.name} is not in docs/configuration.md`);
          if (SECRETISH_KEY.test(e.name)) check(e.value == null, ctx.name, "config", id(w), `${e.name} has a literal value: use a Secret`);
        }
}

// ---- NetworkPolicy flows -----------------------------------------------------------

const ip4 = (s) => s.split(".").reduce((a, b) => a * 256 + Number(b), 0);
function inCidr(ip, cidr) {
  if (!ip.includes(".") || !cidr.includes(".")) return false; // IPv6 blocks: not modelled
  const [net, bits] = cidr.split("/");
  const size = 2 ** (32 - Number(bits));
  return Math.floor(ip4(ip) / size) === Math.floor(ip4(net) / size);
}

function peerMatches(peer, ep, policyNs) {
  if (peer.ipBlock) return inCidr(ep.ip, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((c) => inCidr(ep.ip, c));
  if (!ep.pod) return false;
  if (peer.namespaceSelector ? !matches(peer.namespaceSelector, ep.nsLabels) : ep.ns !== policyNs) return false;
  return peer.podSelector ? matches(peer.podSelector, ep.labels) : true;
}

function portMatches(rulePorts, port, proto, dst) {
  if (!rulePorts?.length) return true;
  return rulePorts.some((p) => {
    if ((p.protocol ?? "TCP") !== proto) return false;
    if (p.port == null) return true;
    if (typeof p.port === "string") return Boolean(dst.pod && dst.ports.some((cp) => cp.name === p.port && cp.containerPort === port && (cp.protocol ?? "TCP") === proto));
    return p.endPort ? port >= p.port && port <= p.endPort : port === p.port;
  });
}

function allowedBy(policies, ep, dir, peer, port, proto, dst) {
  const mine = policies.filter(
    (p) => (p.metadata.namespace ?? "keelson") === ep.ns && matches(p.spec.podSelector ?? {}, ep.labels) && (p.spec.policyTypes ?? ["Ingress"]).includes(dir),
  );
  if (!mine.length) return true;
  const key = dir === "Ingress" ? "ingress" : "egress";
  const peersKey = dir === "Ingress" ? "from" : "to";
  return mine.some((p) =>
    (p.spec[key] ?? []).some(
      (r) => (!r[peersKey]?.length || r[peersKey].some((x) => peerMatches(x, peer, ep.ns))) && portMatches(r.ports, port, proto, dst),
    ),
  );
}

function checkFlows(ctx) {
  const policies = ctx.byKind("NetworkPolicy");
  const ns = ctx.workloads[0]?.metadata?.namespace ?? "keelson";
  const eps = {};
  let host = 10;
  for (const w of [...ctx.workloads, ...ctx.jobs]) {
    const name = podLabels(w)["app.kubernetes.io/name"] ?? w.metadata.name;
    eps[name] = {
      pod: true,
      ip: `10.244.0.${host++}`,
      ns,
      nsLabels: { "kubernetes.io/metadata.name": ns },
      labels: podLabels(w),
      ports: (podSpec(w).containers ?? []).flatMap((c) => c.ports ?? []),
    };
  }
  const synthetic = (ip, nsName, labels, ports) => ({ pod: true, ip, ns: nsName, nsLabels: { "kubernetes.io/metadata.name": nsName }, labels, ports });
  eps["kube-dns"] = synthetic("10.96.0.10", "kube-system", { "k8s-app": "kube-dns" }, [
    { name: "dns", containerPort: 53, protocol: "UDP" },
    { name: "dns-tcp", containerPort: 53, protocol: "TCP" },
  ]);
  eps.prometheus = synthetic("10.244.9.9", "monitoring", { app: "prometheus" }, []);
  eps.stranger = synthetic("10.244.8.8", "other", { app: "stranger" }, []);
  eps["internet-client"] = { ip: "203.0.113.7" };
  eps["internet-server"] = { ip: "198.51.100.7" };
  eps["private-10"] = { ip: "10.1.2.3" };
  eps.metadata = { ip: "169.254.169.254" };
  // The API server: the kubernetes Service's address, and the address the
  // CNI sees after translation (a node's or a control plane's, on 6443).
  eps["apiserver-service"] = { ip: "10.96.0.1" };
  eps.apiserver = { ip: "172.18.0.2" };
  // The datastores: pods of the overlay, or the addresses its egress names.
  for (const [store, pol] of [["postgres", "keelson-egress-postgres"], ["redis", "keelson-egress-redis"]]) {
    if (eps[`keelson-${store}`]) eps[store] = eps[`keelson-${store}`];
    else {
      const cidr = policies.find((p) => p.metadata.name === pol)?.spec?.egress?.[0]?.to?.find((t) => t.ipBlock)?.ipBlock?.cidr;
      eps[store] = cidr ? { ip: cidr.split("/")[0] } : null;
    }
  }

  const clients = ["keelson-gateway", "keelson-auth", "keelson-billing", "keelson-ledger", "keelson-webhook", "keelson-summary"];
  const pgClients = clients.slice(1);
  const redisClients = ["keelson-gateway", "keelson-summary"];
  const keelson = ["keelson-broker", ...clients];
  const metricsPort = (n) => eps[n]?.ports?.find((p) => p.name === "metrics")?.containerPort;
  const base = Number((ctx.config.KEELSON_BROKER_URL ?? "").match(/:(\d+)/)?.[1] ?? 7400);

  const must = [];
  const never = [];
  const flow = (list, from, to, port, proto = "TCP") => list.push([from, to, port, proto]);
  flow(must, "internet-client", "keelson-gateway", 8080);
  flow(must, "stranger", "keelson-gateway", 8080);
  for (const n of keelson) flow(must, "prometheus", n, metricsPort(n));
  for (const n of clients) {
    for (const off of BROKER_OFFSETS) flow(must, n, "keelson-broker", base + off);
    flow(must, n, "kube-dns", 53, "UDP");
    flow(must, n, "kube-dns", 53, "TCP");
  }
  for (const n of pgClients) flow(must, n, "postgres", 5432);
  for (const n of redisClients) flow(must, n, "redis", 6379);
  flow(must, "keelson-webhook", "internet-server", 443);
  flow(must, "keelson-webhook", "internet-server", 80);

  flow(never, "internet-client", "keelson-gateway", metricsPort("keelson-gateway"));
  flow(never, "internet-client", "keelson-broker", base);
  flow(never, "stranger", "keelson-broker", base + 1);
  for (const n of keelson) {
    flow(never, "internet-client", n, metricsPort(n));
    flow(never, "stranger", n, metricsPort(n));
  }
  flow(never, "keelson-gateway", "postgres", 5432);
  flow(never, "keelson-broker", "postgres", 5432);
  for (const n of ["keelson-auth", "keelson-billing", "keelson-ledger", "keelson-webhook", "keelson-broker"]) flow(never, n, "redis", 6379);
  for (const n of ["keelson-broker", "keelson-gateway", "keelson-auth", "keelson-billing", "keelson-ledger", "keelson-summary"]) {
    flow(never, n, "internet-server", 443);
    flow(never, n, "internet-server", 80);
  }
  flow(never, "keelson-broker", "kube-dns", 53, "UDP");
  flow(never, "keelson-webhook", "private-10", 443);
  flow(never, "keelson-webhook", "metadata", 80);
  flow(never, "keelson-webhook", "internet-server", 22);
  flow(never, "keelson-webhook", "internet-server", 5432);
  flow(never, "keelson-webhook", "keelson-gateway", 8080);
  flow(never, "keelson-auth", "keelson-billing", metricsPort("keelson-billing"));
  flow(never, "keelson-auth", "private-10", 5432);
  if (eps["keelson-postgres"]) {
    flow(never, "internet-client", "keelson-postgres", 5432);
    flow(never, "prometheus", "keelson-postgres", 5432);
    flow(never, "keelson-postgres", "internet-server", 443);
    flow(never, "keelson-postgres", "keelson-broker", base);
  }
  if (eps["keelson-redis"]) {
    flow(never, "internet-client", "keelson-redis", 6379);
    flow(never, "keelson-redis", "internet-server", 443);
  }
  // The API server: the setup Job reaches it and DNS, nothing else; no
  // keelson pod or datastore reaches it.
  const setup = ctx.jobs.map((j) => podLabels(j)["app.kubernetes.io/name"] ?? j.metadata.name);
  for (const n of setup) {
    flow(must, n, "apiserver-service", 443);
    flow(must, n, "apiserver", 443);
    flow(must, n, "apiserver", 6443);
    flow(must, n, "kube-dns", 53, "UDP");
    flow(must, n, "kube-dns", 53, "TCP");
    flow(never, n, "postgres", 5432);
    flow(never, n, "redis", 6379);
    flow(never, n, "keelson-broker", base);
    flow(never, n, "keelson-gateway", 8080);
    flow(never, n, "internet-server", 80);
    flow(never, n, "internet-server", 22);
    flow(never, n, "metadata", 80);
    flow(never, "internet-client", n, 443);
    flow(never, "stranger", n, 8080);
    flow(never, "keelson-gateway", n, 443);
  }
  for (const n of keelson) {
    flow(never, n, "apiserver-service", 443);
    flow(never, n, "apiserver", 6443);
  }
  for (const n of ["keelson-postgres", "keelson-redis"].filter((x) => eps[x])) flow(never, n, "apiserver", 6443);

  const passes = ([from, to, port, proto]) => {
    const src = eps[from];
    const dst = eps[to];
    const egress = !src.pod || src.ns !== ns || allowedBy(policies, src, "Egress", dst, port, proto, dst);
    const ingress = !dst.pod || dst.ns !== ns || allowedBy(policies, dst, "Ingress", src, port, proto, dst);
    return egress && ingress;
  };
  for (const [want, list] of [[true, must], [false, never]]) {
    for (const f of list) {
      const [from, to, port, proto] = f;
      if (!check(Boolean(eps[from] && eps[to] && port), ctx.name, "flows", `${from}->${to}`, `an end or the port is missing in the overlay`)) continue;
      check(passes(f) === want, ctx.name, "flows", `${from}->${to}:${port}/${proto}`, want ? "must get through, and is blocked" : "must be blocked, and gets through");
    }
  }
  const deny = policies.find((p) => emptySelector(p.spec?.podSelector) && !p.spec.ingress?.length && !p.spec.egress?.length);
  check(
    Boolean(deny) && ["Ingress", "Egress"].every((t) => deny.spec.policyTypes?.includes(t)),
    ctx.name,
    "netpol",
    "NetworkPolicy/?",
    "no default-deny policy (empty podSelector, Ingress and Egress, no rule)",
  );
}

// ---- renders of several kubectls ----------------------------------------------------

// Generated ConfigMaps and Secrets carry a hash suffix that depends on the
// kustomize version; empty labels and annotations and base64 line breaks too.
function normalize(docs) {
  const gen = new Map();
  for (const o of docs)
    if (["ConfigMap", "Secret"].includes(o.kind)) {
      const m = o.metadata.name.match(/^(.*)-[a-z0-9]{10}$/);
      if (m) gen.set(o.metadata.name, m[1]);
    }
  const walk = (v) => {
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === "object") {
      const out = {};
      for (const k of Object.keys(v).sort()) {
        const x = v[k];
        if ((k === "labels" || k === "annotations") && x && !Object.keys(x).length) continue;
        out[k] = walk(x);
      }
      return out;
    }
    return typeof v === "string" && gen.has(v) ? gen.get(v) : v;
  };
  const out = new Map();
  for (const o of docs) {
    const n = walk(o);
    if (n.kind === "Secret")
      for (const k of Object.keys(n.data ?? {})) n.data[k] = String(n.data[k]).replace(/\s+/g, "");
    out.set(`${n.kind}/${n.metadata?.name}`, JSON.stringify(n));
  }
  return out;
}

function compareRenders(name, first, other, file) {
  const a = normalize(first);
  const b = normalize(other);
  for (const k of new Set([...a.keys(), ...b.keys()]))
    check(a.get(k) === b.get(k), name, "render-diff", k, `${path.basename(file)} renders it ${!b.has(k) ? "not at all" : !a.has(k) ? "although the first does not" : "differently"}`);
}

// ---- committed secrets ----------------------------------------------------------------

function listSource(dir) {
  try {
    const out = execFileSync("git", ["ls-files", "-co", "--exclude-standard", "--", "."], { cwd: dir, encoding: "utf8" });
    return out.split("\n").filter(Boolean).map((f) => path.join(dir, f));
  } catch {
    const all = [];
    const walk = (d) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true }))
        if (e.isDirectory()) walk(path.join(d, e.name));
        else all.push(path.join(d, e.name));
    };
    walk(dir);
    return all;
  }
}

function checkSource(dir) {
  const files = listSource(dir);
  const tracked = new Set(files.map((f) => path.resolve(f)));
  for (const f of files) {
    const rel = f;
    const text = fs.readFileSync(f, "utf8");
    if (URL_CREDENTIALS.test(text)) check(false, "source", "secret-literal", rel, "a URL with a password in it");
    if (!/\.ya?ml$/.test(f)) continue;
    let docs;
    try {
      docs = parseAllDocuments(text).map((d) => d.toJS());
    } catch {
      continue;
    }
    for (const o of docs) {
      if (!o || typeof o !== "object") continue;
      if (o.kind === "Secret") {
        const vals = { ...(o.data ?? {}), ...(o.stringData ?? {}) };
        check(!Object.keys(vals).length, "source", "secret-literal", `${rel}: ${id(o)}`, `holds values (${Object.keys(vals).join(", ")}): keep Secrets out of git`);
      }
      for (const g of o.secretGenerator ?? []) {
        check(!(g.literals ?? []).length, "source", "secret-literal", `${rel}: secretGenerator ${g.name}`, "has literals");
        for (const src of [g.env, ...(g.envs ?? []), ...(g.files ?? [])].filter(Boolean)) {
          const p = path.resolve(path.dirname(f), String(src).split("=").pop());
          check(!tracked.has(p), "source", "secret-literal", `${rel}: secretGenerator ${g.name}`, `${src} would be committed (git must ignore it)`);
        }
      }
    }
  }
  check(files.length > 0, "source", "secret-literal", dir, "no file found to scan");
}

// ---- one overlay ----------------------------------------------------------------------

async function checkOverlay(name, docs, documented) {
  const profile = PROFILES[name] ?? PROFILES.default;
  const byKindMap = new Map();
  for (const o of docs) (byKindMap.get(o.kind) ?? byKindMap.set(o.kind, []).get(o.kind)).push(o);
  const ctx = {
    name,
    profile,
    docs,
    byKind: (k) => byKindMap.get(k) ?? [],
    workloads: docs.filter((o) => WORKLOADS.has(o.kind)),
    jobs: docs.filter((o) => o.kind === "Job"),
    jobSecretsUsed: new Set(),
    keelsonTags: new Set(),
    externalKeys: new Set(),
    users: new Map(),
    config: {},
  };
  for (const cm of ctx.byKind("ConfigMap")) if (cm.metadata.name.startsWith("keelson-config")) ctx.config = cm.data ?? {};
  for (const w of [...ctx.workloads, ...ctx.jobs]) {
    const sa = podSpec(w)?.serviceAccountName;
    ctx.users.set(sa, (ctx.users.get(sa) ?? 0) + 1);
  }
  for (const o of docs) {
    await validateSchema(o, name);
    checkNames(o, name);
  }
  check(ctx.workloads.length > 0, name, "selector", name, "no Deployment or StatefulSet rendered");
  for (const w of ctx.workloads) {
    for (const f of [checkSelector, checkImages, checkProbes, checkResources, checkSecurity, checkServiceAccount, checkPdb, checkNetpol, checkSpread, checkRefs, checkGrace, checkMetrics, checkReplicas])
      f(w, ctx);
  }
  for (const j of ctx.jobs)
    for (const f of [checkImages, checkResources, checkSecurity, checkServiceAccount, checkNetpol, checkRefs, checkJob]) f(j, ctx);
  checkRbac(ctx);
  for (const p of ctx.byKind("PodDisruptionBudget")) {
    const n = ctx.workloads.filter((w) => matches(p.spec?.selector, podLabels(w))).length;
    check(n === 1, name, "pdb", id(p), `selects ${n} workloads, not 1`);
  }
  for (const h of ctx.byKind("HorizontalPodAutoscaler")) {
    const t = h.spec?.scaleTargetRef ?? {};
    check(ctx.workloads.some((w) => w.kind === t.kind && w.metadata.name === t.name), name, "hpa", id(h), `its target ${t.kind}/${t.name} is not in the overlay`);
  }
  for (const s of ctx.byKind("Service")) {
    const sel = s.spec?.selector;
    check(Boolean(sel) && ctx.workloads.some((w) => matches({ matchLabels: sel }, podLabels(w))), name, "selector", id(s), "selects no pod of the overlay");
  }
  check(ctx.keelsonTags.size <= 1, name, "image", name, `keelson images of several tags: ${[...ctx.keelsonTags]}`);
  if (ctx.workloads.some((w) => podSpec(w).containers.some(isKeelson))) {
    checkBrokers(ctx);
    checkHpa(ctx);
    checkConfig(ctx, documented);
  }
  if (profile.flows) checkFlows(ctx);
  return ctx;
}

// Every KEELSON_* name docs/configuration.md mentions. Its tables also
// abbreviate: "`KEELSON_SUMMARY_HTTP_HOST` / `_PORT`" names
// KEELSON_SUMMARY_HTTP_PORT too, so a `_SUFFIX` after a full name counts
// with every prefix of that name.
function documentedNames(text) {
  const names = new Set();
  for (const line of text.split("\n")) {
    let last = null;
    for (const m of line.matchAll(/`(KEELSON_[A-Z0-9_]+|_[A-Z0-9_]+)`/g)) {
      if (m[1].startsWith("KEELSON_")) {
        last = m[1];
        names.add(last);
      } else if (last) {
        const parts = last.split("_");
        for (let i = 2; i < parts.length; i++) names.add(parts.slice(0, i).join("_") + m[1]);
      }
    }
    for (const m of line.matchAll(/KEELSON_[A-Z0-9_]+/g)) names.add(m[0]);
  }
  return names;
}

// ---- main ------------------------------------------------------------------------------

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const documented = a.configDoc ? documentedNames(fs.readFileSync(a.configDoc, "utf8")) : null;
  for (const ov of a.overlays) {
    const before = failures.length;
    const checksBefore = checks;
    const renders = ov.files.map((f) => loadDocs(f, ov.name));
    const docs = [...renders[0], ...(a.adds[ov.name] ?? []).flatMap((f) => loadDocs(f, ov.name))];
    const ctx = await checkOverlay(ov.name, docs, documented);
    for (let i = 1; i < renders.length; i++) compareRenders(ov.name, renders[0], renders[i], ov.files[i]);
    const kinds = {};
    for (const o of docs) kinds[o.kind] = (kinds[o.kind] ?? 0) + 1;
    console.log(
      `k8s check: overlay ${ov.name}: ${docs.length} objects (${Object.entries(kinds).map(([k, n]) => `${n} ${k}`).join(", ")}), ` +
        `${renders.length} render(s), ${checks - checksBefore} checks, ${failures.length - before} failures`,
    );
    if (ctx.externalKeys.size) console.log(`k8s check: overlay ${ov.name} expects these Secret keys from outside git: ${[...ctx.externalKeys].sort().join(" ")}`);
  }
  if (a.source) {
    const before = failures.length;
    const checksBefore = checks;
    checkSource(a.source);
    console.log(`k8s check: source ${a.source}: ${checks - checksBefore} checks, ${failures.length - before} failures`);
  }
  for (const f of failures) console.log(`FAIL [${f.overlay}] ${f.rule}: ${f.object}: ${f.msg}`);

  if (a.expect) {
    const fired = new Set(failures.map((f) => f.rule));
    const missing = a.expect.filter((r) => !fired.has(r));
    if (!failures.length || missing.length) {
      console.log(`k8s check: negative test FAILED: these rules did not fire on the bad input: ${missing.join(", ") || "(none fired at all)"}`);
      process.exit(1);
    }
    console.log(`k8s check: negative test ok: the bad input fails ${failures.length} checks, every expected rule among them (${a.expect.join(", ")})`);
    process.exit(0);
  }
  if (failures.length) {
    console.log(`k8s check: ${failures.length} of ${checks} checks failed`);
    process.exit(1);
  }
  console.log(`k8s check: all ${checks} checks passed`);
}

main().catch((e) => {
  console.error(e.stack);
  process.exit(2);
});
