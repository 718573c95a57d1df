/**
 * The portal in JupyterLab.
 *
 * TensorBoard: open a folder of the file browser in TensorBoard (toolbar
 * button, context menu, launcher, command palette), and list or stop the
 * running TensorBoards in a side panel. The TensorBoards themselves are run
 * by the server extension (portal.session) behind
 * `{base}portal/api/tensorboards`.
 *
 * The session: its time left and its GPUs' use in the status bar, and a
 * notice before its Slurm job ends (`{base}portal/api/session`,
 * `{base}portal/api/gpus`).
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, showErrorMessage } from '@jupyterlab/apputils';
import {
  FileBrowser,
  IDefaultFileBrowser,
  IFileBrowserFactory
} from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';

import { absoluteUrl, startTensorBoard } from './api';
import { tensorboardIcon } from './icon';
import { TensorBoardPanel } from './panel';
import { SessionStatus } from './statusbar';

namespace CommandIDs {
  /** On the one folder selected in the file browser (toolbar, context menu). */
  export const open = 'portal-tensorboard:open';
  /** On the launcher's folder, or the file browser's current folder. */
  export const openCurrent = 'portal-tensorboard:open-current';
  /** Show the panel of the running TensorBoards. */
  export const showPanel = 'portal-tensorboard:show-panel';
}

const PALETTE_CATEGORY = 'TensorBoard';

/**
 * The one folder selected in `browser`, or null when the selection is
 * anything else (nothing, a file, several items).
 */
function selectedFolder(browser: FileBrowser | null): string | null {
  if (!browser) {
    return null;
  }
  const items = Array.from(browser.selectedItems());
  return items.length === 1 && items[0].type === 'directory'
    ? items[0].path
    : null;
}

/**
 * Start (or find) the TensorBoard on `logdir` and show it in a new tab.
 *
 * The tab is opened at once, while the click that asked for it is still being
 * handled, so that popup blockers let it through; it is pointed at
 * TensorBoard once the server answers, and closed if the server refuses.
 */
async function openTensorBoard(
  settings: ServerConnection.ISettings,
  logdir: string,
  panel: TensorBoardPanel
): Promise<void> {
  // The server's root folder is named '' by the file browser, '.' by the API.
  logdir = logdir || '.';
  const tab = window.open('', '_blank');
  if (tab) {
    tab.opener = null;
    tab.document.title = 'TensorBoard';
    tab.document.body.textContent = `Starting TensorBoard on ${logdir}…`;
  }
  try {
    const tensorboard = await startTensorBoard(settings, logdir);
    const url = absoluteUrl(settings, tensorboard.url);
    if (tab) {
      tab.location.href = url;
    } else {
      window.open(url, '_blank', 'noopener');
    }
  } catch (err) {
    tab?.close();
    await showErrorMessage('Could not open TensorBoard', err as Error);
  }
  void panel.refresh();
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: '@dsportal/tensorboard:plugin',
  description:
    'Open a folder in TensorBoard from the file browser, the launcher or the command palette; list and stop the running TensorBoards.',
  autoStart: true,
  requires: [IDefaultFileBrowser, IFileBrowserFactory],
  optional: [ILauncher, ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    defaultBrowser: FileBrowser,
    factory: IFileBrowserFactory,
    launcher: ILauncher | null,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ) => {
    const { commands, serviceManager } = app;
    const settings = serviceManager.serverSettings;
    const contents = serviceManager.contents;
    const currentBrowser = () =>
      factory.tracker.currentWidget ?? defaultBrowser;

    const panel = new TensorBoardPanel(settings);
    app.shell.add(panel, 'left', { rank: 750 });
    restorer?.add(panel, panel.id);

    commands.addCommand(CommandIDs.open, {
      label: args =>
        args.isPalette
          ? 'Open TensorBoard on the Selected Folder'
          : 'TensorBoard',
      caption: 'Open TensorBoard on the selected folder, in a new tab',
      icon: args => (args.isPalette ? undefined : tensorboardIcon),
      className: args => (args.toolbar ? 'jp-portal-tensorboard-button' : ''),
      isEnabled: () => selectedFolder(currentBrowser()) !== null,
      execute: () => {
        const folder = selectedFolder(currentBrowser());
        if (folder !== null) {
          return openTensorBoard(settings, contents.localPath(folder), panel);
        }
      }
    });

    commands.addCommand(CommandIDs.openCurrent, {
      label: args =>
        args.isPalette
          ? 'Open TensorBoard on the Current Folder'
          : 'TensorBoard',
      caption: 'Open TensorBoard on the current folder, in a new tab',
      icon: args => (args.isPalette ? undefined : tensorboardIcon),
      execute: args => {
        // The launcher passes its folder as `cwd`.
        const folder =
          typeof args.cwd === 'string' ? args.cwd : currentBrowser().model.path;
        return openTensorBoard(settings, contents.localPath(folder), panel);
      }
    });

    commands.addCommand(CommandIDs.showPanel, {
      label: 'Show Running TensorBoards',
      execute: () => app.shell.activateById(panel.id)
    });

    // The toolbar button follows the selection.
    const watch = (browser: FileBrowser) =>
      browser.selectionChanged.connect(() =>
        commands.notifyCommandChanged(CommandIDs.open)
      );
    factory.tracker.forEach(watch);
    factory.tracker.widgetAdded.connect((_, browser) => watch(browser));
    factory.tracker.currentChanged.connect(() =>
      commands.notifyCommandChanged(CommandIDs.open)
    );

    launcher?.add({
      command: CommandIDs.openCurrent,
      category: 'Other',
      rank: 10
    });
    for (const command of Object.values(CommandIDs)) {
      palette?.addItem({
        command,
        category: PALETTE_CATEGORY,
        args: { isPalette: true }
      });
    }
  }
};

/**
 * The session's time left and GPU use in the status bar; the notice before
 * its end.
 */
const sessionPlugin: JupyterFrontEndPlugin<void> = {
  id: '@dsportal/tensorboard:session',
  description:
    "Show the session's time left and its GPUs' use in the status bar, and a notice with a link to extend it before its end.",
  autoStart: true,
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null) => {
    const status = new SessionStatus(app.serviceManager.serverSettings);
    statusBar?.registerStatusItem('portal-session:time-left', {
      item: status.timeLeft,
      align: 'left',
      rank: 100
    });
    statusBar?.registerStatusItem('portal-session:gpus', {
      item: status.gpus,
      align: 'left',
      rank: 101
    });
  }
};

export default [plugin, sessionPlugin];
