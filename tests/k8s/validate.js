#!/usr/bin/env node
// Validates rendered Kubernetes manifests against the Kubernetes API schemas, offline, with npm's
// kubernetes-models (installed by `scripts/setup.sh --k8s`).
//
//   node tests/k8s/validate.js NODE_MODULES_DIR FILE.yaml...
//
// Every YAML document is loaded into the kubernetes-models class of its apiVersion and kind and
// .validate()d (the models' precompiled JSON-schema validators: types, required fields, enums,
// formats). The schemas accept unknown fields almost everywhere, so a second pass reports keys
// the models' declarations do not list (a misspelt `readOnlyRootFileSystem` would otherwise
// pass silently).
// Exit 0: all valid; 1: a document is invalid (each problem printed); 2: usage or load error.
'use strict';

const fs = require('fs');
const path = require('path');
const {pathToFileURL} = require('url');

async function main(argv) {
  if (argv.length < 2) {
    console.error('usage: validate.js NODE_MODULES_DIR FILE.yaml...');
    return 2;
  }
  const modules = path.resolve(argv[0]);
  const yaml = require(path.join(modules, 'js-yaml'));
  const modelsDir = path.join(modules, 'kubernetes-models');
  modulesRoot = modules;
  let problems = 0;
  let checked = 0;
  for (const file of argv.slice(1)) {
    const docs = yaml.loadAll(fs.readFileSync(file, 'utf8')).filter((d) => d != null);
    for (const doc of docs) {
      const where = `${path.basename(file)}: ${doc.kind}/${doc.metadata && doc.metadata.name}`;
      const [group, version] = doc.apiVersion.includes('/')
        ? doc.apiVersion.split('/')
        : ['', doc.apiVersion];
      const modelFile = path.join(modelsDir, group, version, `${doc.kind}.js`);
      if (!fs.existsSync(modelFile)) {
        console.log(`FAIL ${where}: kubernetes-models has no ${doc.apiVersion} ${doc.kind}`);
        problems++;
        continue;
      }
      const Model = (await import(pathToFileURL(modelFile).href))[doc.kind];
      try {
        new Model(doc).validate();
      } catch (e) {
        console.log(`FAIL ${where}: ${e.message}`);
        problems++;
        continue;
      }
      const unknown = [];
      checkKeys(doc, modelFile.replace(/\.js$/, '.d.ts'), '', unknown);
      for (const u of unknown) console.log(`FAIL ${where}: unknown field ${u}`);
      problems += unknown.length;
      if (unknown.length === 0) console.log(`ok   ${where} (${doc.apiVersion})`);
      checked++;
    }
  }
  console.log(`${checked} objects checked, ${problems} problem(s)`);
  return problems === 0 ? 0 : 1;
}

// The strict-key pass reads the models' TypeScript declarations (<Kind>.d.ts beside each
// class): `"key"?: Type;` lines list an object's fields, and `import { IName } from "./X.js"`
// lines say where a field's type is declared. Fields whose type is another model interface (or
// an Array of one) are followed; maps, strings, numbers and int-or-string are leaves.
const declCache = new Map();
function declaration(file) {
  if (declCache.has(file)) return declCache.get(file);
  let decl = null;
  if (fs.existsSync(file)) {
    const text = fs.readFileSync(file, 'utf8');
    const imports = new Map();
    for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) {
      imports.set(m[1], resolveImport(file, m[2]));
    }
    const body = text.match(/export interface \w+(?: extends [\w, ]+)? \{([\s\S]*?)\n\}/);
    const fields = new Map();
    if (body) {
      for (const m of body[1].matchAll(/^ {4}"([^"]+)"\??: (.*?);?$/gm)) {
        const t = m[2].trim();
        const ref = t.match(/^(?:Array<)?(\w+)>?$/);
        fields.set(m[1], ref && imports.has(ref[1]) ? imports.get(ref[1]) : null);
      }
    }
    decl = body ? {fields} : null;
  }
  declCache.set(file, decl);
  return decl;
}

let modulesRoot = '';
function resolveImport(from, spec) {
  const base = spec.replace(/\.js$/, '');
  if (spec.startsWith('.')) return path.resolve(path.dirname(from), `${base}.d.ts`);
  return path.join(modulesRoot, `${base}.d.ts`);
}

// Reports every key of `obj` that its declaration does not list, recursively.
function checkKeys(obj, declFile, at, unknown) {
  if (obj === null || typeof obj !== 'object' || declFile === null) return;
  if (Array.isArray(obj)) {
    obj.forEach((item, i) => checkKeys(item, declFile, `${at}[${i}]`, unknown));
    return;
  }
  const decl = declaration(declFile);
  if (decl === null) return;  // not a model interface: nothing to check against
  for (const [key, value] of Object.entries(obj)) {
    if (!decl.fields.has(key)) {
      unknown.push(`${at}.${key}`);
      continue;
    }
    checkKeys(value, decl.fields.get(key), `${at}.${key}`, unknown);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    console.error(`validate.js: ${e.stack || e}`);
    process.exit(2);
  });
