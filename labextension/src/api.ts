/**
 * The portal's TensorBoard API of the single-user server:
 * `{base}portal/api/tensorboards`.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

const API_PATH = 'portal/api/tensorboards';

/**
 * A TensorBoard run by the server, as its API describes it.
 */
export interface ITensorBoard {
  /** The server's id for it, used to stop it. */
  id: string;
  /** The folder it reads, relative to the server's root. */
  logdir: string;
  /** Where it is reached; may be relative to the server's base URL. */
  url: string;
  /** When it started (ISO 8601), in a listing. */
  started?: string;
  /** When it was last used (ISO 8601), in a listing. */
  last_activity?: string;
}

async function request<T>(
  settings: ServerConnection.ISettings,
  method: string,
  path: string,
  body?: unknown
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_PATH, path);
  const init: RequestInit = { method };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { 'Content-Type': 'application/json' };
  }
  const response = await ServerConnection.makeRequest(url, init, settings);
  if (!response.ok) {
    // Reads the server's {"message": ...} into the error's message.
    throw await ServerConnection.ResponseError.create(response);
  }
  return (response.status === 204 ? undefined : await response.json()) as T;
}

/**
 * The running TensorBoards.
 */
export function listTensorBoards(
  settings: ServerConnection.ISettings
): Promise<ITensorBoard[]> {
  return request<ITensorBoard[]>(settings, 'GET', '');
}

/**
 * Start a TensorBoard on `logdir` (relative to the server's root, as the file
 * browser shows it), or get the one already running there.
 */
export function startTensorBoard(
  settings: ServerConnection.ISettings,
  logdir: string
): Promise<ITensorBoard> {
  return request<ITensorBoard>(settings, 'POST', '', { logdir });
}

/**
 * Stop a running TensorBoard.
 */
export function stopTensorBoard(
  settings: ServerConnection.ISettings,
  id: string
): Promise<void> {
  return request<void>(settings, 'DELETE', encodeURIComponent(id));
}

/**
 * The absolute address of a TensorBoard's `url`, which may be absolute, or a
 * path relative to the server's base URL. Only http(s) addresses pass.
 */
export function absoluteUrl(
  settings: ServerConnection.ISettings,
  url: string
): string {
  const base = new URL(settings.baseUrl, window.location.href);
  const result = new URL(url, base);
  if (result.protocol !== 'http:' && result.protocol !== 'https:') {
    throw new Error(`Not a web address: ${url}`);
  }
  return result.href;
}
