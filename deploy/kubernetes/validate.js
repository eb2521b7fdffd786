// Validates Kubernetes objects against the API's schema, offline (validate.sh
// installs the packages and converts the YAML to JSON).
//
//   node validate.js OBJECTS.json      # [{"source": "...", "object": {...}}, ...]
//
// Two checks, because neither alone is strict:
//   1. kubernetes-models' JSON-schema validators (generated from the API's
//      OpenAPI): required fields, types, enums, int-or-string and quantities.
//      They accept unknown fields (the OpenAPI does not forbid them).
//   2. kubernetes-types' TypeScript declarations, type-checked by tsc with
//      each object as a typed literal: an unknown or misspelled field is an
//      excess-property error, as `kubectl apply --validate=strict` would say.
// Before the real objects, a known-bad Deployment must fail both checks, so a
// validator that stopped checking cannot pass silently.
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");
const ts = require("typescript");

// "apps/v1" -> "apps/v1"; "v1" -> core.
function modelModule(apiVersion, kind) {
  return `kubernetes-models/${apiVersion}/${kind}`;
}

function typesModule(apiVersion) {
  const where = apiVersion.includes("/") ? apiVersion : `core/${apiVersion}`;
  return `kubernetes-types/${where}`;
}

// Schema check; returns error lines (empty when valid).
function schemaErrors(object) {
  let Model;
  try {
    Model = require(modelModule(object.apiVersion, object.kind))[object.kind];
  } catch (e) {
    return [`no schema for ${object.apiVersion} ${object.kind}`];
  }
  try {
    new Model(object).validate();
    return [];
  } catch (e) {
    return String(e.message).split("\n");
  }
}

// Type-checks every object as a typed literal; returns error lines per index.
function typeErrors(objects) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "k8s-types-"));
  const files = objects.map((object, i) => {
    const file = path.join(dir, `object${i}.ts`);
    const text =
      `import type { ${object.kind} } from "${typesModule(object.apiVersion)}";\n` +
      `export const object: ${object.kind} = ${JSON.stringify(object, null, 2)};\n`;
    fs.writeFileSync(file, text);
    return file;
  });
  const typesDir = path.dirname(require.resolve("kubernetes-types/package.json"));
  const program = ts.createProgram(files, {
    strict: true,
    noEmit: true,
    types: [],
    baseUrl: dir,
    typeRoots: [],
    moduleResolution: ts.ModuleResolutionKind.Node10,
    paths: { "kubernetes-types/*": [path.join(typesDir, "*")] },
  });
  const errors = objects.map(() => []);
  for (const d of ts.getPreEmitDiagnostics(program)) {
    // Excess properties: unknownFields below reports every one, with its path
    // (tsc stops at the first incompatibility of an assignment).
    if (d.code === 2353 || d.code === 2561) continue;
    const message = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    const index = d.file ? files.indexOf(path.resolve(d.file.fileName)) : -1;
    if (index < 0) {
      errors.forEach((list) => list.push(message));
      continue;
    }
    const { line } = d.file.getLineAndCharacterOfPosition(d.start);
    const near = d.file.text.split("\n")[line].trim();
    errors[index].push(`${message} (at: ${near})`);
  }
  const checker = program.getTypeChecker();
  files.forEach((file, i) => {
    errors[i].push(...unknownFields(checker, program.getSourceFile(file)));
  });
  fs.rmSync(dir, { recursive: true, force: true });
  return errors;
}

// Every field of an object literal that its declared type does not have,
// as a path: spec.template.spec.terminationGracePeriodSecond.
function unknownFields(checker, sourceFile) {
  const found = [];
  const visit = (node, where) => {
    if (ts.isObjectLiteralExpression(node)) {
      // Optional fields are typed `T | undefined`: look at T.
      const contextual = checker.getContextualType(node);
      const type = contextual && checker.getNonNullableType(contextual);
      const open = !type || type.isUnion() || checker.getIndexInfosOfType(type).length > 0;
      for (const property of node.properties) {
        const name = property.name && property.name.text;
        const at = where ? `${where}.${name}` : name;
        if (!open && !checker.getPropertyOfType(type, name)) {
          found.push(`unknown field ${at} (not in ${checker.typeToString(type)})`);
        }
        if (property.initializer) visit(property.initializer, at);
      }
    } else if (ts.isArrayLiteralExpression(node)) {
      node.elements.forEach((element, i) => visit(element, `${where}[${i}]`));
    } else {
      ts.forEachChild(node, (child) => visit(child, where));
    }
  };
  visit(sourceFile, "");
  return found;
}

function check(items) {
  const types = typeErrors(items.map((item) => item.object));
  return items.map((item, i) => ({
    ...item,
    errors: [...schemaErrors(item.object), ...types[i]],
  }));
}

// A Deployment with a misspelled field and a string where an integer belongs.
function knownBad() {
  return {
    source: "negative control",
    object: {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "bad" },
      spec: {
        selector: { matchLabels: { a: "b" } },
        template: {
          metadata: { labels: { a: "b" } },
          spec: {
            terminationGracePeriodSeconds: "120",
            restartPolicyy: "Always",
            containers: [{ name: "c", image: "i", argz: ["--x"] }],
          },
        },
      },
    },
  };
}

function main() {
  const items = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const [control, ...results] = check([knownBad(), ...items]);
  const caught = control.errors.join("\n");
  const expected = [
    "must be integer",
    "unknown field spec.template.spec.restartPolicyy",
    "unknown field spec.template.spec.containers[0].argz",
  ];
  if (!expected.every((text) => caught.includes(text))) {
    console.error("validate.js: the negative control was not rejected by both checks:\n" + caught);
    process.exit(2);
  }
  console.log("negative control rejected: " + control.errors.length + " errors, e.g.");
  control.errors.forEach((line) => console.log("  " + line.split("\n")[0]));
  let failed = 0;
  for (const r of results) {
    const name = `${r.object.kind}/${r.object.metadata && r.object.metadata.name}`;
    if (r.errors.length === 0) {
      console.log(`ok      ${r.source}: ${r.object.apiVersion} ${name}`);
    } else {
      failed++;
      console.log(`INVALID ${r.source}: ${r.object.apiVersion} ${name}`);
      r.errors.forEach((line) => console.log("  " + line));
    }
  }
  console.log(`${results.length - failed} valid, ${failed} invalid`);
  process.exit(failed === 0 && results.length > 0 ? 0 : 1);
}

main();
