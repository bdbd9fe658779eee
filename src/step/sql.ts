/**
 * How the step sends SQL: {@link StepSql}, over a Kysely transaction (statements unprepared), over
 * a pg client (named statements, prepared and planned once per connection), or over a pg pool,
 * each statement on a client of its own (the unlocked path's).
 */
import { CompiledQuery, type Transaction } from 'kysely';
import { withPgClient, type PgPool } from '../db/pgTransaction.js';
import type { Database } from '../db/schema.js';
import type { Statement } from './statement.js';

/**
 * How the step sends SQL inside a transaction. A statement's name identifies its text, so an
 * implementation may prepare it once per connection and reuse it ({@link pgStepSql}); the Kysely
 * one sends it unprepared.
 */
export interface StepSql {
  query<R>(statement: Statement, values: readonly unknown[]): Promise<R[]>;
}

/** A transaction the step can run in: Kysely's, or a {@link StepSql} over a connection in a transaction. */
export type StepTransaction = Transaction<Database> | StepSql;

function isStepSql(tx: StepTransaction): tx is StepSql {
  return typeof (tx as Partial<StepSql>).query === 'function';
}

/** The {@link StepSql} of a transaction: itself, or an adapter over a Kysely transaction. */
export function stepSqlOf(tx: StepTransaction): StepSql {
  if (isStepSql(tx)) return tx;
  return {
    async query<R>(statement: Statement, values: readonly unknown[]) {
      const { rows } = await tx.executeQuery(CompiledQuery.raw(statement.text, [...values]));
      return rows as R[];
    },
  };
}

/** A pg client (or anything with its `query({ name, text, values })`): named, i.e. prepared, statements. */
export interface PgQueryable {
  query<R>(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: R[] }>;
}

/**
 * A {@link StepSql} over a pg client that is inside a transaction: every statement is a named
 * (prepared) one, parsed and planned once per connection.
 */
export function pgStepSql(client: PgQueryable): StepSql {
  return {
    async query<R>({ name, text }: Statement, values: readonly unknown[]) {
      const { rows } = await client.query<R>({ name, text, values: values as unknown[] });
      return rows;
    },
  };
}

/**
 * A {@link StepSql} over a pg pool for statements that are each a transaction of their own (the
 * unlocked path's): each takes a client when it is sent and gives it back when it has returned,
 * named (prepared) as on {@link pgStepSql}; a client the failure left unusable is discarded.
 */
export function pgPoolStepSql(pool: PgPool): StepSql {
  return {
    query<R>(statement: Statement, values: readonly unknown[]) {
      return withPgClient(pool, (client) => pgStepSql(client).query<R>(statement, values));
    },
  };
}
