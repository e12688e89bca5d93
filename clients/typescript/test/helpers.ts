/** Shared by the tests: the fixtures (written by scripts/make_fixtures.py) and plain views. */

import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { dumpJson, type JsonValue } from "../src/json";

/** test/fixtures/, from dist-test/test/ where the compiled tests run. */
export const FIXTURES = resolve(__dirname, "../../test/fixtures");

export function fixture<T>(name: string): T {
  return JSON.parse(readFileSync(resolve(FIXTURES, name), "utf8")) as T;
}

/** A JSON value of ours as plain JavaScript (ints as numbers), to compare with a fixture. */
export function plain(value: JsonValue): unknown {
  return JSON.parse(dumpJson(value));
}
