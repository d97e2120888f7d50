// The few parts of Node's test runner and assert module the tests use, declared here so that
// `tsc` checks the tests without @types/node (which would also give the browser code Node's
// globals). Only for the type checker; Node ignores this file.

declare module 'node:test' {
  type Body = () => void | Promise<void>;
  export function test(name: string, fn: Body): Promise<void>;
  export function describe(name: string, fn: () => void): Promise<void>;
}

declare module 'node:assert/strict' {
  interface Assert {
    (value: unknown, message?: string): asserts value;
    ok(value: unknown, message?: string): asserts value;
    equal<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    notEqual(actual: unknown, expected: unknown, message?: string): void;
    deepEqual<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    match(value: string, pattern: RegExp, message?: string): void;
    throws(fn: () => unknown, error: abstract new (...args: any[]) => Error, message?: string): void;
    rejects(
      promise: Promise<unknown>,
      error: abstract new (...args: any[]) => Error,
      message?: string,
    ): Promise<void>;
  }
  const assert: Assert;
  export default assert;
}
