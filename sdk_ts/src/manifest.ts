// Runner manifests: the contract's RunnerManifest, with labels as plain strings allowed, checked the
// way a host checks what it discovers.
import { clone, create, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { ConfigFieldType, RunnerCapabilitiesSchema, type RunnerManifest, RunnerManifestSchema } from "./gen/agentrunner/v1/manifest_pb.js";
import { validateConfig } from "./config.js";

export const PROTOCOL_VERSION = "1";
export const RUNNER_ID_PATTERN = /^plugin:[a-z0-9][a-z0-9_.-]*\/[a-z0-9][a-z0-9_.-]*\/[a-z0-9][a-z0-9_.-]*$/i;

type Text = string | { translations: Record<string, string> };
type Init = Exclude<MessageInitShape<typeof RunnerManifestSchema>, RunnerManifest>;
export type ManifestInit = Omit<Init, "label" | "description" | "$typeName"> & {
  label: Text;
  description?: Text;
};

const text = (t: Text | undefined) => (typeof t === "string" ? { translations: { en_US: t } } : t);

/** A complete, checked manifest: name = last id segment, protocol_version "1", event_context on. */
export function checkManifest(init: ManifestInit | RunnerManifest): RunnerManifest {
  const m = "$typeName" in init && init.$typeName
    ? clone(RunnerManifestSchema, init as RunnerManifest)
    : create(RunnerManifestSchema, { ...(init as ManifestInit), label: text(init.label as Text), description: text(init.description as Text | undefined) });
  if (!RUNNER_ID_PATTERN.test(m.id)) throw new TypeError(`manifest id '${m.id}' must look like plugin:<author>/<name>/<runner>`);
  const last = m.id.slice(m.id.lastIndexOf("/") + 1);
  if (!m.name) m.name = last;
  else if (m.name !== last) throw new TypeError(`manifest name '${m.name}' is not the last segment of the id`);
  if (!m.protocolVersion) m.protocolVersion = PROTOCOL_VERSION;
  else if (m.protocolVersion.split(".")[0] !== PROTOCOL_VERSION) throw new TypeError(`protocol_version '${m.protocolVersion}' is not '1'`);
  if (!m.label || Object.keys(m.label.translations).length === 0) throw new TypeError(`manifest ${m.id} needs a label`);
  m.capabilities ??= create(RunnerCapabilitiesSchema);
  m.capabilities.eventContext = true;
  const perms = m.permissions;
  if (perms) {
    for (const [name, values] of Object.entries(perms)) {
      if (Array.isArray(values) && values.some((v) => v === 0)) throw new TypeError(`permissions.${name}: unset value`);
    }
  }
  const seen = new Set<string>();
  for (const f of m.configSchema) {
    if (!f.name) throw new TypeError("every config field needs a name");
    if (seen.has(f.name)) throw new TypeError(`config field '${f.name}' is declared twice`);
    if (f.type === ConfigFieldType.UNSPECIFIED) throw new TypeError(`config field '${f.name}' needs a type`);
    if (f.type === ConfigFieldType.SELECT && f.options.length === 0) throw new TypeError(`config field '${f.name}' is a select without options`);
    if (f.defaultValue && toJson(ValueSchema, f.defaultValue) !== null) validateConfig([f], {});
    seen.add(f.name);
  }
  return m;
}
